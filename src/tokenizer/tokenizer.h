#pragma once
// A HF `tokenizer.json` byte-level BPE tokenizer (the DeepSeek tokenizer and tokenizers trained
// with HF's ByteLevel BPE), plus the BOS/EOS policy of `tokenizer_config.json`.
//
// encode(): added/special tokens are cut out first (leftmost-longest), the rest is
// pre-tokenized and BPE-encoded piece by piece. decode(): HF's ByteLevel decoder followed by a
// lossy UTF-8 conversion. Both give the same ids / text as HF tokenizers. Thread-safe.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace deepinfer::tokenizer {

class Bpe;
class PreTokenizer;
class AddedVocab;

class Tokenizer {
public:
    // Loads dir/tokenizer.json and, when present, dir/tokenizer_config.json. Throws
    // deepinfer::Error for missing files or unsupported tokenizer components.
    static std::shared_ptr<Tokenizer> from_dir(const std::string& dir);
    static std::shared_ptr<Tokenizer> from_files(const std::string& tokenizer_json, const std::string& config_json);
    ~Tokenizer();

    // Token ids of `text` (UTF-8). Invalid UTF-8 is an InvalidArgument error naming the byte
    // offset. With add_special_tokens, BOS / EOS are added as tokenizer_config.json says.
    Result<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens = true) const;
    std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

    // Raw bytes `id` contributes to decoded text (may be part of a UTF-8 character).
    const std::string& token_bytes(int32_t id) const;
    bool is_special(int32_t id) const;
    bool is_valid_id(int32_t id) const;
    std::optional<int32_t> token_to_id(std::string_view token) const;
    // Highest id + 1 (the size of an embedding table covering every token).
    int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }
    std::optional<int32_t> bos_id() const { return bos_id_; }
    std::optional<int32_t> eos_id() const { return eos_id_; }
    bool add_bos() const { return add_bos_; }

private:
    Tokenizer() = default;
    void encode_text(std::string_view text, std::vector<int32_t>& out) const;
    void encode_normalized_part(std::string_view text, std::vector<int32_t>& out) const;

    std::unique_ptr<Bpe> bpe_;
    std::unique_ptr<PreTokenizer> pre_;
    std::unique_ptr<AddedVocab> added_raw_, added_normalized_;  // matched in this order
    std::vector<std::string> bytes_;   // per id: bytes its decoding contributes
    std::vector<char> special_;        // per id
    std::vector<char> valid_;          // per id: has a token
    std::optional<int32_t> bos_id_, eos_id_;
    bool add_bos_ = false, add_eos_ = false;
};

// Turns a stream of token ids into text pieces that never split a UTF-8 character: bytes of an
// incomplete character are held back until it completes. The concatenation of all pieces plus
// flush() equals Tokenizer::decode of the whole sequence.
class IncrementalDecoder {
public:
    IncrementalDecoder(std::shared_ptr<const Tokenizer> tok, bool skip_special_tokens = false)
        : tok_(std::move(tok)), skip_special_(skip_special_tokens) {}
    std::string push(int32_t id);
    std::string flush();

private:
    std::shared_ptr<const Tokenizer> tok_;
    bool skip_special_;
    std::string pending_;
};

}  // namespace deepinfer::tokenizer
