#include "grammar/vocabulary.h"

#include <algorithm>

#include "grammar/encoding.h"
#include "grammar/grammar_error.h"
#include "grammar/pda.h"

namespace deepinfer::grammar {

std::shared_ptr<const Vocabulary> Vocabulary::create(std::vector<std::string> token_bytes, std::vector<uint8_t> is_special,
                                                     std::vector<int32_t> eos_ids) {
    if (is_special.size() != token_bytes.size())
        grammar_fail("vocabulary: {} special flags for {} tokens", is_special.size(), token_bytes.size());
    std::shared_ptr<Vocabulary> v(new Vocabulary());
    v->token_bytes_ = std::move(token_bytes);
    v->is_special_ = std::move(is_special);
    for (int32_t id : eos_ids)
        if (id < 0 || id >= v->size()) grammar_fail("vocabulary: EOS id {} out of range", id);
    std::sort(eos_ids.begin(), eos_ids.end());
    v->eos_ids_ = std::move(eos_ids);
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < v->size(); ++id)
        if (!v->is_special_[id] && !v->token_bytes_[id].empty() && !v->is_eos(id)) ids.push_back(id);
    v->trie_ = TokenTrie::build(v->token_bytes_, ids);
    CodepointSet json_content = CodepointSet::all();
    json_content = json_content.minus(CodepointSet::range(0, 0x1F));
    json_content = json_content.minus(CodepointSet::of('"'));
    json_content = json_content.minus(CodepointSet::of('\\'));
    v->add_slice("json-string-content", json_content);
    Grammar g;
    v->non_ascii_char_ = regular_dfa(g, utf8_class(g, CodepointSet::range(0x80, CodepointSet::kMax)));
    return v;
}

bool Vocabulary::is_eos(int32_t id) const { return std::binary_search(eos_ids_.begin(), eos_ids_.end(), id); }

namespace {

// Number of characters of a token made of the class (a trailing partial character counts), or 0
// when the token has a byte outside the class.
int32_t chars_of_class(const Dfa& one_char, const std::string& bytes) {
    int32_t s = one_char.start, chars = 0;
    for (char c : bytes) {
        if (s == one_char.start) ++chars;
        s = one_char.step(s, static_cast<uint8_t>(c));
        if (s == Dfa::kDead) return 0;
        if (one_char.accepting[s]) s = one_char.start;
    }
    return chars;
}

}  // namespace

void Vocabulary::add_slice(std::string name, const CodepointSet& chars) {
    VocabularySlice slice;
    slice.name = std::move(name);
    Grammar g;
    slice.one_char = regular_dfa(g, utf8_class(g, chars));
    slice.up_to.assign(VocabularySlice::kMaxChars, std::vector<uint32_t>(mask_words(), 0));
    std::vector<int32_t> rest;
    for (int32_t id : trie_.token_ids()) {
        int32_t chars = chars_of_class(slice.one_char, token_bytes_[id]);
        if (chars == 0 || chars > VocabularySlice::kMaxChars) {
            rest.push_back(id);
            continue;
        }
        for (int32_t n = chars; n <= VocabularySlice::kMaxChars; ++n) slice.up_to[n - 1][id >> 5] |= 1u << (id & 31);
    }
    slice.rest = TokenTrie::build(token_bytes_, std::move(rest));
    slices_.push_back(std::move(slice));
}

}  // namespace deepinfer::grammar
