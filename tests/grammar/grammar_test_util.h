#pragma once
// Shared helpers of the grammar tests: the DeepSeek vocabulary as the grammar engine sees it, a
// one-byte-per-token vocabulary for byte-level checks, and whole-string acceptance.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "grammar/compiler.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::grammar::test {

// The model's logit dimension; ids past the tokenizer's last token have no bytes.
constexpr int32_t kDeepSeekLogits = 129280;

// tests/data, or the copy DEEPINFER_TEST_DATA names (binaries run from another tree).
inline std::string data_path(const std::string& rel) {
    const char* moved = std::getenv("DEEPINFER_TEST_DATA");
    return std::string(moved && *moved ? moved : DEEPINFER_TEST_DATA) + "/" + rel;
}

inline std::shared_ptr<const tokenizer::Tokenizer> deepseek_tokenizer() {
    static auto tok = tokenizer::Tokenizer::from_dir(std::string(DEEPINFER_SOURCE_DIR) + "/models/deepseek-v4-tokenizer");
    return tok;
}

inline std::shared_ptr<const Vocabulary> vocabulary_from(const tokenizer::Tokenizer& tok, int32_t size) {
    std::vector<std::string> bytes(size);
    std::vector<uint8_t> special(size, 0);
    for (int32_t id = 0; id < tok.vocab_size() && id < size; ++id) {
        if (!tok.is_valid_id(id)) continue;
        bytes[id] = tok.token_bytes(id);
        special[id] = tok.is_special(id);
    }
    std::vector<int32_t> eos;
    if (tok.eos_id()) eos.push_back(*tok.eos_id());
    return Vocabulary::create(std::move(bytes), std::move(special), std::move(eos));
}

inline std::shared_ptr<const Vocabulary> deepseek_vocabulary() {
    static auto vocab = vocabulary_from(*deepseek_tokenizer(), std::max(kDeepSeekLogits, deepseek_tokenizer()->vocab_size()));
    return vocab;
}

// Token i < 256 is the single byte i; 256 is EOS.
inline std::shared_ptr<const Vocabulary> byte_vocabulary() {
    static auto vocab = [] {
        std::vector<std::string> bytes(257);
        for (int i = 0; i < 256; ++i) bytes[i] = std::string(1, static_cast<char>(i));
        return Vocabulary::create(std::move(bytes), std::vector<uint8_t>(257, 0), {256});
    }();
    return vocab;
}

inline std::shared_ptr<const CompiledGrammar> must_compile(Result<std::shared_ptr<const CompiledGrammar>> r) {
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? r.value() : nullptr;
}

// The whole text is a complete output of the grammar.
inline bool accepts_text(const std::shared_ptr<const CompiledGrammar>& g, std::string_view text) {
    GrammarMatcher m(g);
    return m.accept_bytes(text) && m.can_terminate();
}

inline bool mask_allows(const std::vector<uint32_t>& mask, int32_t id) { return (mask[id >> 5] >> (id & 31)) & 1; }

}  // namespace deepinfer::grammar::test
