#pragma once
// Counter-based random numbers (Philox4x32-10): the value for (seed, position, lane) is a pure
// function of those three, so a request's samples never depend on what else is in the batch, on
// preemption and recompute, or on the step in which a token happens to be sampled.
#include <cstdint>

namespace deepinfer::runtime {

inline uint64_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
    uint64_t p = static_cast<uint64_t>(a) * b;
    *hi = static_cast<uint32_t>(p >> 32);
    return static_cast<uint32_t>(p);
}

// Four 32-bit random words for counter (position, lane) under key `seed`.
inline void philox4x32(uint64_t seed, uint64_t position, uint32_t lane, uint32_t out[4]) {
    uint32_t c0 = static_cast<uint32_t>(position), c1 = static_cast<uint32_t>(position >> 32), c2 = lane, c3 = 0;
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
        uint32_t hi0, hi1;
        uint32_t lo0 = static_cast<uint32_t>(mulhilo32(0xD2511F53u, c0, &hi0));
        uint32_t lo1 = static_cast<uint32_t>(mulhilo32(0xCD9E8D57u, c2, &hi1));
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

// Uniform in [0, 1) with 53 random bits.
inline double uniform01(uint64_t seed, uint64_t position, uint32_t lane = 0) {
    uint32_t r[4];
    philox4x32(seed, position, lane, r);
    uint64_t bits = (static_cast<uint64_t>(r[0]) << 21) ^ r[1];
    return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 0x1.0p-53;
}

}  // namespace deepinfer::runtime
