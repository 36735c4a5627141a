#pragma once
// The tokenizer's vocabulary as the grammar engine sees it, built once per tokenizer and shared
// read-only by every compiled grammar and matcher: the bytes of each token id, which ids are
// special (they never match grammar bytes) and which are end-of-sequence (allowed only where the
// grammar can end). The size is the logit dimension, which may exceed the number of real tokens;
// ids without bytes are never allowed.
//
// It also precomputes slices: for a common character class (JSON string content), the tokens made
// only of such characters, grouped by length in characters, and a trie of all the other tokens.
// Where every string of up to n such characters keeps the grammar alive (inside a free string,
// n is unbounded; inside a string with a length limit, n is what is left), the slice's tokens of up
// to n characters are allowed at once and only the rest of the vocabulary has to be walked.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/codepoint_set.h"
#include "grammar/dfa.h"
#include "grammar/token_trie.h"

namespace deepinfer::grammar {

struct VocabularySlice {
    // Members longer than this are left to the walk, like non-members.
    static constexpr int32_t kMaxChars = 16;

    std::string name;
    Dfa one_char;  // one character of the class, as UTF-8
    // up_to[n - 1]: bitmask of the members of at most n characters (a trailing partial character
    // counts as one), n = 1..kMaxChars.
    std::vector<std::vector<uint32_t>> up_to;
    TokenTrie rest;  // every grammar token not in up_to[kMaxChars - 1]
};

class Vocabulary {
public:
    // token_bytes[id] for id in [0, vocab size); is_special[id] nonzero for special tokens.
    static std::shared_ptr<const Vocabulary> create(std::vector<std::string> token_bytes, std::vector<uint8_t> is_special,
                                                    std::vector<int32_t> eos_ids);

    int32_t size() const { return static_cast<int32_t>(token_bytes_.size()); }
    int32_t mask_words() const { return (size() + 31) / 32; }
    const std::string& token_bytes(int32_t id) const { return token_bytes_[id]; }
    bool is_special(int32_t id) const { return is_special_[id] != 0; }
    bool is_eos(int32_t id) const;
    const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
    // Tokens that can match grammar bytes: not special, not empty.
    const TokenTrie& trie() const { return trie_; }
    const std::vector<VocabularySlice>& slices() const { return slices_; }
    // One non-ASCII character as UTF-8 (to test whether a state loops on all of them).
    const Dfa& non_ascii_char() const { return non_ascii_char_; }

private:
    Vocabulary() = default;
    void add_slice(std::string name, const CodepointSet& chars);

    std::vector<std::string> token_bytes_;
    std::vector<uint8_t> is_special_;
    std::vector<int32_t> eos_ids_;
    TokenTrie trie_;
    std::vector<VocabularySlice> slices_;
    Dfa non_ascii_char_;
};

}  // namespace deepinfer::grammar
