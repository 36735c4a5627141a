// Token ids and decoded text identical to HF tokenizers on the committed parity vectors
// (tests/data/tokenizer_vectors.jsonl, produced by scripts/gen_tokenizer_vectors.py).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {
namespace {

std::string unhex(const std::string& hex) {
    std::string out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    return out;
}

std::string tokenizer_dir() { return std::string(DEEPINFER_SOURCE_DIR) + "/models/deepseek-v4-tokenizer"; }

std::vector<nlohmann::json> vectors() {
    std::ifstream in(test::data_path("tokenizer_vectors.jsonl"));
    std::vector<nlohmann::json> rows;
    std::string line;
    while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
    return rows;
}

TEST(TokenizerParity, EncodeMatchesHfOnEveryCorpusString) {
    auto tok = Tokenizer::from_dir(tokenizer_dir());
    int checked = 0, refused = 0, mismatched = 0;
    for (const auto& row : vectors()) {
        if (!row.contains("utf8_hex")) continue;
        std::string text = unhex(row["utf8_hex"]);
        auto ids = tok->encode(text, false);
        if (row.contains("error")) {  // HF refuses unpaired surrogates; so must we
            EXPECT_FALSE(ids.ok()) << row["utf8_hex"];
            ++refused;
            continue;
        }
        ASSERT_TRUE(ids.ok()) << ids.status().message();
        auto expected = row["ids"].get<std::vector<int32_t>>();
        if (*ids != expected && ++mismatched <= 10) ADD_FAILURE() << "mismatch for " << row["utf8_hex"] << ": " << text;
        ++checked;
    }
    EXPECT_EQ(mismatched, 0);
    EXPECT_GE(checked + refused, 2000);
    EXPECT_GT(refused, 0);
}

TEST(TokenizerParity, DecodeMatchesHf) {
    auto tok = Tokenizer::from_dir(tokenizer_dir());
    int checked = 0;
    for (const auto& row : vectors()) {
        if (!row.contains("decode_ids")) continue;
        auto ids = row["decode_ids"].get<std::vector<int32_t>>();
        EXPECT_EQ(tok->decode(ids), unhex(row["text_hex"])) << row["decode_ids"];
        ++checked;
    }
    EXPECT_GE(checked, 500);
}

TEST(TokenizerParity, BosFromTokenizerConfig) {
    auto tok = Tokenizer::from_dir(tokenizer_dir());
    ASSERT_TRUE(tok->add_bos());
    auto with = tok->encode("Hello world", true), without = tok->encode("Hello world", false);
    ASSERT_TRUE(with.ok() && without.ok());
    ASSERT_EQ(with->size(), without->size() + 1);
    EXPECT_EQ((*with)[0], 0);
    EXPECT_EQ(std::vector<int32_t>(with->begin() + 1, with->end()), *without);
}

TEST(TokenizerParity, IncrementalDecodeNeverSplitsCharactersAndEqualsFullDecode) {
    auto tok = Tokenizer::from_dir(tokenizer_dir());
    for (const auto& row : vectors()) {
        std::vector<int32_t> ids;
        if (row.contains("decode_ids")) {
            ids = row["decode_ids"].get<std::vector<int32_t>>();
        } else if (row.contains("ids")) {
            ids = row["ids"].get<std::vector<int32_t>>();
        } else {
            continue;
        }
        IncrementalDecoder dec(tok);
        std::string joined;
        for (int32_t id : ids) {
            std::string piece = dec.push(id);
            ASSERT_EQ(find_invalid_utf8(piece), std::string::npos) << "broken UTF-8 emitted";
            joined += piece;
        }
        joined += dec.flush();
        EXPECT_EQ(joined, tok->decode(ids));
    }
}

}  // namespace
}  // namespace deepinfer::tokenizer
