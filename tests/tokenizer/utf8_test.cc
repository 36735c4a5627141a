#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <random>

#include "tokenizer/pre_tokenizer.h"

namespace deepinfer::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, FindsInvalidSequences) {
    EXPECT_EQ(find_invalid_utf8("héllo 你好 😀"), std::string::npos);
    EXPECT_EQ(find_invalid_utf8("ab\xC0\x80"), 2u);          // overlong
    EXPECT_EQ(find_invalid_utf8("a\xED\xA0\x80"), 1u);       // surrogate U+D800
    EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);    // past U+10FFFF
    EXPECT_EQ(find_invalid_utf8("x\xE4\xBD"), 1u);           // truncated
}

TEST(Utf8, LossyReplacesMaximalSubpartsLikeRust) {
    // Cases from the Unicode "U+FFFD substitution of maximal subparts" practice that Rust follows.
    EXPECT_EQ(utf8_lossy("a\x80" "b"), "a" + kFffd + "b");
    EXPECT_EQ(utf8_lossy("\xE4\xBD" "a"), kFffd + "a");                 // one FFFD for a truncated char
    EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);      // surrogate: each byte
    EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), kFffd);                      // incomplete at the end
    EXPECT_EQ(utf8_lossy("\xF0\x9F\x98\x80"), "😀");
    EXPECT_EQ(utf8_lossy("\xC2"), kFffd);
}

TEST(Utf8, StreamingTailIsHeldBack) {
    size_t tail = 0;
    EXPECT_EQ(utf8_lossy("ab\xF0\x9F", true, &tail), "ab");
    EXPECT_EQ(tail, 2u);
    EXPECT_EQ(utf8_lossy("ab\x80\xF0", true, &tail), "ab" + kFffd);
    EXPECT_EQ(tail, 1u);
}

TEST(Utf8, LossyIsCompositionalAcrossRandomSplits) {
    std::mt19937 rng(9);
    for (int iter = 0; iter < 2000; ++iter) {
        std::string bytes;
        for (int i = 0; i < 12; ++i) bytes.push_back(static_cast<char>(rng() % 4 == 0 ? rng() % 128 : 0x80 + rng() % 128));
        std::string streamed, pending;
        for (char c : bytes) {
            pending.push_back(c);
            size_t tail = 0;
            streamed += utf8_lossy(pending, true, &tail);
            pending.erase(0, pending.size() - tail);
        }
        streamed += utf8_lossy(pending);
        EXPECT_EQ(streamed, utf8_lossy(bytes));
    }
}

TEST(PreTokenizerRegex, WhitespaceIsUnicodeWhiteSpaceAsInOniguruma) {
    std::string p = oniguruma_to_pcre2("\\s+(?!\\S)|[^\\s\\p{L}]");
    EXPECT_EQ(p.find("\\s"), std::string::npos);
    EXPECT_NE(p.find("\\x{85}"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::tokenizer
