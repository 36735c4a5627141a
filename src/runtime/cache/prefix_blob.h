#pragma once
// One cached span as it is kept below the device: a header, the span's tokens, then the payload
// (every block group's blocks of the span, then the carry snapshot when the entry has one). Host
// slots hold blobs; the disk keeps them as files and the remote store as values, byte for byte,
// so moving an entry between tiers is a copy and every reader checks the same checksums.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "model/causal_lm.h"
#include "runtime/cache/prefix_key.h"

namespace deepinfer::runtime {

struct BlobLayout {
    explicit BlobLayout(const model::PrefixGeometry& g);
    int64_t span_tokens = 0;
    std::array<int64_t, 2> group_bytes{};  // all blocks of the span, per group
    std::array<int64_t, 2> block_bytes{};
    int64_t carry_bytes = 0;

    int64_t payload_offset() const;
    int64_t max_bytes() const { return payload_offset() + group_bytes[0] + group_bytes[1] + carry_bytes; }
    // Block `i` of group `g` (all layers) and the carry snapshot inside a blob.
    std::byte* block(std::byte* blob, int g, int64_t i) const;
    std::byte* carries(std::byte* blob) const { return blob + payload_offset() + group_bytes[0] + group_bytes[1]; }
};

struct BlobInfo {
    uint64_t namespace_seed = 0;
    PrefixKey key, parent;
    std::span<const int32_t> tokens;
    bool has_carries = false;
};

// Writes the header and tokens; the payload is filled in afterwards (copies from the device).
void begin_blob(std::byte* blob, const BlobLayout& layout, const BlobInfo& info);
// Checksums the payload once it is complete. Returns the blob's size.
int64_t seal_blob(std::byte* blob, const BlobLayout& layout);
// The stored size of a sealed blob (from its header).
int64_t blob_bytes(const std::byte* blob);
bool blob_has_carries(const std::byte* blob);
PrefixKey blob_parent(const std::byte* blob);
PrefixKey blob_key(const std::byte* blob);
std::span<const int32_t> blob_tokens(const std::byte* blob);
// Empty when `blob` is a sealed, intact entry of `key` in this namespace and layout; else what is
// wrong with it (truncated, a checksum mismatch, another key or layout).
std::string check_blob(std::span<const std::byte> blob, const BlobLayout& layout, uint64_t namespace_seed,
                       const PrefixKey& key);

}  // namespace deepinfer::runtime
