#include "tokenizer/added_vocab.h"

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deepinfer::tokenizer {

AddedVocab::AddedVocab(const nlohmann::json& list, bool normalized) : trie_(1), first_byte_(256, 0) {
    for (const auto& t : list) {
        if (t.value("normalized", true) != normalized) continue;
        DI_CHECK(!t.value("lstrip", false) && !t.value("rstrip", false) && !t.value("single_word", false),
                 "tokenizer.json: added token '{}' uses lstrip/rstrip/single_word, which is not supported",
                 t.value("content", ""));
        AddedToken tok{t.at("id").get<int32_t>(), t.at("content").get<std::string>(), t.value("special", false)};
        DI_CHECK(!tok.content.empty(), "tokenizer.json: empty added token (id {})", tok.id);
        int32_t node = 0;
        for (char c : tok.content) {
            uint8_t b = static_cast<uint8_t>(c);
            int32_t next = child(node, b);
            if (next < 0) {
                next = static_cast<int32_t>(trie_.size());
                trie_.push_back({});
                trie_[node].children.emplace_back(b, next);
            }
            node = next;
        }
        trie_[node].token = tok.id;
        first_byte_[static_cast<uint8_t>(tok.content[0])] = 1;
        tokens_.push_back(std::move(tok));
    }
}

int32_t AddedVocab::child(int32_t node, uint8_t b) const {
    for (const auto& [byte, next] : trie_[node].children)
        if (byte == b) return next;
    return -1;
}

AddedVocab::Match AddedVocab::find(std::string_view text, size_t from) const {
    for (size_t i = from; i < text.size(); ++i) {
        if (!first_byte_[static_cast<uint8_t>(text[i])]) continue;
        int32_t node = 0;
        Match best;
        for (size_t j = i; j < text.size(); ++j) {
            node = child(node, static_cast<uint8_t>(text[j]));
            if (node < 0) break;
            if (trie_[node].token >= 0) best = {i, j + 1, trie_[node].token};
        }
        if (best.id >= 0) return best;
    }
    return {};
}

}  // namespace deepinfer::tokenizer
