#pragma once
// Rounding onto the low-precision grids of DeepSeek-V4.1's quantisation-aware training, shared
// by every backend (host and device code). Each function mirrors one step of the trained
// quantiser; rounding is to nearest, ties to even.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/backend.h"

#ifdef __CUDACC__
#define DI_HOST_DEVICE __host__ __device__
#else
#define DI_HOST_DEVICE
#endif

namespace deepinfer::kernels::quant {

// 2^ceil(log2 t) for t > 0 (an unsigned-exponent "ue8m0" scale), from the float's bits.
DI_HOST_DEVICE inline float pow2_ceil(float t) {
    uint32_t bits;
    memcpy(&bits, &t, sizeof bits);
    int k = static_cast<int>((bits >> 23) & 0xFFu) - 127 + ((bits & 0x7FFFFFu) != 0 ? 1 : 0);
    return ldexpf(1.0f, k);
}

// float8 e4m3fn: 3 mantissa bits, normals from 2^-6, subnormal step 2^-9 (|v| <= 448 assumed).
DI_HOST_DEVICE inline float round_e4m3(float v) {
    float mag = fabsf(v);
    if (mag == 0.0f) return v;
    int exp2;
    frexpf(mag, &exp2);  // mag = m * 2^exp2, m in [0.5, 1)
    int e = exp2 - 1 < -6 ? -6 : exp2 - 1;
    float step = ldexpf(1.0f, e - 3);
    return copysignf(rintf(mag / step) * step, v);
}

// float4 e2m1: {0, 0.5, 1, 1.5, 2, 3, 4, 6}; a tie goes to the even code (|q| <= 6 assumed).
DI_HOST_DEVICE inline float round_e2m1(float q) {
    const float bounds[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float mag = fabsf(q);
    int code = 0;
    for (int i = 0; i < 7; ++i) code += (i % 2 == 1) ? (mag >= bounds[i]) : (mag > bounds[i]);
    return copysignf(1.0f, q) < 0.0f ? -values[code] : values[code];
}

DI_HOST_DEVICE inline int block_of(QuantFormat f) { return f == QuantFormat::kFp4E4m3x16 ? 16 : 32; }

// The block's scale from its largest magnitude.
DI_HOST_DEVICE inline float block_scale(QuantFormat f, float amax) {
    switch (f) {
        case QuantFormat::kFp8Ue8m0x32: return pow2_ceil(fmaxf(amax, 1e-4f) * (1.0f / 448.0f));
        case QuantFormat::kFp4E4m3x16: return round_e4m3(fmaxf(amax, 6.0f * 0x1p-9f) / 6.0f);
        default: return pow2_ceil(fmaxf(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f));
    }
}

DI_HOST_DEVICE inline float quantize_value(QuantFormat f, float x, float scale) {
    if (f == QuantFormat::kFp8Ue8m0x32) return round_e4m3(fminf(fmaxf(x / scale, -448.0f), 448.0f)) * scale;
    return round_e2m1(fminf(fmaxf(x / scale, -6.0f), 6.0f)) * scale;
}

// In place on one block of `n` values.
DI_HOST_DEVICE inline void quantize_block(QuantFormat f, float* x, int n) {
    float amax = 0.0f;
    for (int i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(x[i]));
    float scale = block_scale(f, amax);
    for (int i = 0; i < n; ++i) x[i] = quantize_value(f, x[i], scale);
}

}  // namespace deepinfer::kernels::quant
