#pragma once
// The token classes DeepSeek-V4.1's Engram hashes instead of raw ids: tokens whose single-token
// decoding normalises alike (" The", "the", "THE", "thé") share a class. Normalisation as the
// training code's tokenizers pipeline: NFKC, NFD, combining marks removed, each character
// lowercased, runs of ASCII whitespace collapsed to one space, White_Space stripped at both ends
// (a lone space is kept). A token that decodes to broken UTF-8 keeps its raw byte-level spelling.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

std::string engram_normalize(std::string_view utf8);

struct EngramTokenMap {
    std::vector<int32_t> class_of;  // per token id
    int32_t num_classes = 0;
};

// Classes numbered by first appearance over token ids 0 .. vocab_size() - 1.
EngramTokenMap engram_token_map(const Tokenizer& tok);

}  // namespace deepinfer::tokenizer
