#pragma once
// Keys of the prefix cache: a hash chain over block-aligned token spans. The key of span i hashes
// the key of span i - 1 with the span's tokens, seeded by the cache's namespace (model, layout,
// device), so equal keys mean equal whole prefixes of one model, in every tier and every engine.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace deepinfer::runtime {

struct PrefixKey {
    uint64_t high = 0, low = 0;
    bool operator==(const PrefixKey&) const = default;
    std::string hex() const;  // 32 lowercase hex digits
};

struct PrefixKeyHash {
    size_t operator()(const PrefixKey& k) const { return static_cast<size_t>(k.low ^ (k.high * 0x9E3779B97F4A7C15ull)); }
};

// The key of the span `tokens` that follows the prefix keyed `parent` (a zero key: the start).
PrefixKey chain_key(uint64_t namespace_seed, const PrefixKey& parent, std::span<const int32_t> tokens);
// A 64-bit checksum of bytes (stored entries are checked with it before use).
uint64_t checksum64(std::span<const std::byte> bytes);

}  // namespace deepinfer::runtime
