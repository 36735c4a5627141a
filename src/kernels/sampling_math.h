#pragma once
// The arithmetic of token sampling, written once for every backend: the host sampler, the scalar
// reference and the CUDA kernels compile these functions and get the same bits for the same inputs.
// That is what lets a device sampler choose exactly the token the host sampler chooses.
//
// Everything here is either integer arithmetic or single IEEE operations rounded to nearest-even:
// on the device through the _rn intrinsics (which nvcc never fuses into a multiply-add), on the
// host in translation units built with -ffp-contract=off (src/kernels/CMakeLists.txt). The
// sampling definition that uses these pieces is stated in runtime/sampler.h.
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DI_HOST_DEVICE __host__ __device__
#else
#define DI_HOST_DEVICE
#endif

namespace deepinfer::kernels::sampling {

DI_HOST_DEVICE inline float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

DI_HOST_DEVICE inline float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

DI_HOST_DEVICE inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

DI_HOST_DEVICE inline float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

DI_HOST_DEVICE inline uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
#endif
}

DI_HOST_DEVICE inline float float_of_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
#endif
}

// --- counter-based random numbers --------------------------------------------------------------
// Philox4x32-10: four random words for counter (position, lane) under key `seed`. A pure function
// of the three, so a request's draws never depend on the batch, on preemption and recompute, or on
// the step in which its token happens to be sampled.
DI_HOST_DEVICE inline void philox4x32(uint64_t seed, uint64_t position, uint32_t lane, uint32_t out[4]) {
    uint32_t c0 = static_cast<uint32_t>(position), c1 = static_cast<uint32_t>(position >> 32), c2 = lane, c3 = 0;
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
        uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0, p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
        uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
        uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

// 53 random bits for (seed, position, lane): the uniform draw u = bits / 2^53 in [0, 1).
DI_HOST_DEVICE inline uint64_t random_bits53(uint64_t seed, uint64_t position, uint32_t lane = 0) {
    uint32_t r[4];
    philox4x32(seed, position, lane, r);
    return ((static_cast<uint64_t>(r[0]) << 21) ^ r[1]) & ((uint64_t{1} << 53) - 1);
}

// --- the processed logit ---------------------------------------------------------------------------
// A token's penalty word: bit 31 set when it is in the prompt, the low 31 bits count its
// occurrences in the output so far.
constexpr uint32_t kInPromptBit = 0x80000000u;
constexpr uint32_t kCountMask = 0x7FFFFFFFu;

struct Penalties {
    float repetition = 1.0f, presence = 0.0f, frequency = 0.0f;
};

// The logit after the logit bias and the penalties, in the host sampler's order: logit + bias;
// the repetition penalty for a token of the prompt or the output (divided when positive, else
// multiplied); then minus (frequency · count + presence) for a token of the output.
DI_HOST_DEVICE inline float processed_logit(float logit, float bias, uint32_t word, const Penalties& p) {
    float z = add_rn(logit, bias);
    if (word != 0 && p.repetition != 1.0f) z = z > 0.0f ? div_rn(z, p.repetition) : mul_rn(z, p.repetition);
    uint32_t count = word & kCountMask;
    if (count != 0) z = sub_rn(z, add_rn(mul_rn(p.frequency, static_cast<float>(count)), p.presence));
    return z;
}

// --- weights -------------------------------------------------------------------------------------
// e^x for x <= 0: x = k·ln2 + r with k the nearest integer to x/ln2 (|r| <= ln2/2 up to rounding),
// e^r by its Taylor polynomial of degree 7 (truncation below 6e-9 relative), times 2^k through the
// exponent bits. 0 below -87, where e^x would leave the normal floats (and NaN gives 0). Its
// accuracy (a few ulp) only shapes the distribution negligibly; what matters is that every
// backend gets the same bits.
DI_HOST_DEVICE inline float sampling_exp(float x) {
    if (!(x > -87.0f)) return 0.0f;
    // log2(e), and ln 2 split in two: the high part has 16 significant bits, so k · hi is exact.
    constexpr float kLog2e = 0x1.715476p+0f, kLn2Hi = 0x1.62e4p-1f, kLn2Lo = 0x1.7f7d1cp-20f;
#ifdef __CUDA_ARCH__
    float k = floorf(add_rn(mul_rn(x, kLog2e), 0.5f));  // in [-125, 0]
#else
    float k = std::floor(add_rn(mul_rn(x, kLog2e), 0.5f));
#endif
    float r = sub_rn(sub_rn(x, mul_rn(k, kLn2Hi)), mul_rn(k, kLn2Lo));
    // 1/n! rounded to float, Horner from degree 7 down.
    float p = 0x1.a01a02p-13f;
    p = add_rn(mul_rn(p, r), 0x1.6c16c2p-10f);
    p = add_rn(mul_rn(p, r), 0x1.111112p-7f);
    p = add_rn(mul_rn(p, r), 0x1.555556p-5f);
    p = add_rn(mul_rn(p, r), 0x1.555556p-3f);
    p = add_rn(mul_rn(p, r), 0.5f);
    p = add_rn(mul_rn(p, r), 1.0f);
    p = add_rn(mul_rn(p, r), 1.0f);
    return mul_rn(p, float_of_bits(static_cast<uint32_t>(static_cast<int>(k) + 127) << 23));
}

// A token's relative probability e = sampling_exp((z - max z) / temperature), in (0, 1] for
// finite logits (1 for the largest).
DI_HOST_DEVICE inline float relative_probability(float z, float max_z, float temperature) {
    return sampling_exp(div_rn(sub_rn(z, max_z), temperature));
}

// Weights are e scaled to integers, w = floor(e · 2^S) with S = 63 - bit_width(vocab): a whole
// row's weights sum below 2^63, so sums, prefix sums and the draw are exact integer arithmetic
// whatever order a backend adds in. (For a vocabulary of 129,280, S = 46: e above 2^-23 keeps all
// its bits, and the tokens that round to 0 together hold less than 2e-9 of the mass.)
DI_HOST_DEVICE inline int weight_shift(int64_t vocab) {
    int bits = 0;
    while (bits < 63 && (vocab >> bits) != 0) ++bits;
    return 63 - bits;
}

DI_HOST_DEVICE inline uint64_t weight_of(float e, int shift) {
    float scaled = mul_rn(e, float_of_bits(static_cast<uint32_t>(shift + 127) << 23));  // exact: a power of 2
#ifdef __CUDA_ARCH__
    return __float2ull_rz(scaled);
#else
    return static_cast<uint64_t>(scaled);  // truncates toward zero
#endif
}

// A key per relative probability that orders like it: the float's bits (e >= 0).
DI_HOST_DEVICE inline uint32_t probability_key(float e) { return float_bits(e); }

// The weight of a key (the inverse of probability_key, then weight_of).
DI_HOST_DEVICE inline uint64_t weight_of_key(uint32_t key, int shift) { return weight_of(float_of_bits(key), shift); }

// A key per raw logit that orders like the value (-0 and +0 alike): for the top logprobs.
DI_HOST_DEVICE inline uint32_t logit_key(float v) {
    uint32_t u = float_bits(v == 0.0f ? 0.0f : v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// --- thresholds and the draw ---------------------------------------------------------------------
// The weight the top-p prefix must reach: ceil(top_p · total) in double arithmetic, at most total.
DI_HOST_DEVICE inline uint64_t top_p_weight(float top_p, uint64_t total) {
#ifdef __CUDA_ARCH__
    double t = ceil(__dmul_rn(static_cast<double>(top_p), __ull2double_rn(total)));
#else
    double t = std::ceil(static_cast<double>(top_p) * static_cast<double>(total));
#endif
    return t >= static_cast<double>(total) ? total : static_cast<uint64_t>(t);
}

// The draw's target in [0, total): floor(u · total) = (bits53 · total) >> 53, exactly.
DI_HOST_DEVICE inline uint64_t draw_target(uint64_t bits53, uint64_t total) {
#ifdef __CUDA_ARCH__
    uint64_t hi = __umul64hi(bits53, total), lo = bits53 * total;
#else
    unsigned __int128 product = static_cast<unsigned __int128>(bits53) * total;
    uint64_t hi = static_cast<uint64_t>(product >> 64), lo = static_cast<uint64_t>(product);
#endif
    return (hi << 11) | (lo >> 53);
}

}  // namespace deepinfer::kernels::sampling
