#pragma once
// The added tokens of a tokenizer (special tokens like <｜User｜> and plain added tokens), found in
// text by leftmost-longest matching on a byte trie, as HF tokenizers' AddedVocabulary does.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace deepinfer::tokenizer {

struct AddedToken {
    int32_t id;
    std::string content;
    bool special;
};

class AddedVocab {
public:
    // Takes the tokens of tokenizer.json's "added_tokens" whose "normalized" flag equals
    // `normalized` (HF matches the two kinds in two passes); throws for lstrip / rstrip /
    // single_word tokens.
    AddedVocab(const nlohmann::json& list, bool normalized);

    const std::vector<AddedToken>& tokens() const { return tokens_; }
    // The leftmost-longest added token in text[from:], as (begin, end, id); end == npos if none.
    struct Match {
        size_t begin = std::string_view::npos, end = std::string_view::npos;
        int32_t id = -1;
    };
    Match find(std::string_view text, size_t from) const;

private:
    struct Node {
        int32_t token = -1;                       // id when a token ends here
        std::vector<std::pair<uint8_t, int32_t>> children;
    };
    int32_t child(int32_t node, uint8_t b) const;

    std::vector<AddedToken> tokens_;
    std::vector<Node> trie_;
    std::vector<char> first_byte_;  // bytes that start some token (fast skip)
};

}  // namespace deepinfer::tokenizer
