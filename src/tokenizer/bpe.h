#pragma once
// Byte-level BPE (HF tokenizers' "BPE" model under a ByteLevel pre-tokenizer): a piece's bytes map
// to GPT-2's printable stand-in characters, start as one symbol each, and merge by rank (lowest
// first, leftmost among equals). Pieces seen before come from a bounded cache. Thread-safe.
#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace deepinfer::tokenizer {

// GPT-2's byte -> character table (as UTF-8) and its inverse.
const std::array<std::string, 256>& byte_to_chars();
// The byte a stand-in character decodes to, or -1.
int char_to_byte(uint32_t code_point);

class Bpe {
public:
    // Parses tokenizer.json's "model" (type BPE); throws deepinfer::Error when malformed or when a
    // byte has no single-character token.
    explicit Bpe(const nlohmann::json& model);

    void encode_piece(std::string_view bytes, std::vector<int32_t>& out) const;
    size_t vocab_size() const { return id_to_token_.size(); }
    // Token string of `id` (byte-level spelling), empty when the id has none.
    const std::string& token(int32_t id) const;
    std::optional<int32_t> id_of(std::string_view token) const;

private:
    void merge(std::vector<int32_t>& symbols) const;

    std::unordered_map<std::string, int32_t> vocab_;
    std::vector<std::string> id_to_token_;
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left << 32 | right) -> (rank, merged)
    std::array<int32_t, 256> byte_ids_{};
    mutable std::mutex cache_mutex_;
    mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace deepinfer::tokenizer
