#include "runtime/cache/prefix_key.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace deepinfer::runtime {

std::string PrefixKey::hex() const {
    char buf[33];
    std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(high),
                  static_cast<unsigned long long>(low));
    return buf;
}

PrefixKey chain_key(uint64_t namespace_seed, const PrefixKey& parent, std::span<const int32_t> tokens) {
    std::vector<std::byte> bytes(sizeof(parent) + tokens.size_bytes());
    std::memcpy(bytes.data(), &parent, sizeof(parent));
    std::memcpy(bytes.data() + sizeof(parent), tokens.data(), tokens.size_bytes());
    XXH128_hash_t h = XXH3_128bits_withSeed(bytes.data(), bytes.size(), namespace_seed);
    return {h.high64, h.low64};
}

uint64_t checksum64(std::span<const std::byte> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

}  // namespace deepinfer::runtime
