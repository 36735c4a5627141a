#pragma once
// MXFP4 weight rows (core/quant_mxfp4.h) decoded with AVX-512: 16 values at a time from a 16-entry
// table of twice the e2m1 values times the block's halved power-of-two scale, so every value is
// exact (in fp32, and in bf16). For the AVX-512 translation units only.
#include <immintrin.h>

#include <cstdint>

namespace deepinfer::kernels::cpu::avx512 {

// Twice the e2m1 value of each code (the scales are stored halved).
inline __m512 twice_e2m1() { return _mm512_setr_ps(0, 1, 2, 3, 4, 6, 8, 12, -0.0f, -1, -2, -3, -4, -6, -8, -12); }

// Values [kk, kk + 16) of a packed row whose scales start at `scales` (kk % 16 == 0).
inline __m512 mxfp4_values(const uint8_t* row, const float* scales, int64_t kk) {
    int64_t in_pair = kk % 64;
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + (kk / 64) * 32 + in_pair % 32));
    __m512i codes =
        _mm512_and_si512(_mm512_srli_epi32(_mm512_cvtepu8_epi32(bytes), in_pair >= 32 ? 4 : 0), _mm512_set1_epi32(0xF));
    return _mm512_mul_ps(_mm512_permutexvar_ps(codes, twice_e2m1()), _mm512_set1_ps(scales[kk / 32]));
}

// `rows` packed rows of k values (row_bytes apart, scales at byte blocks * 16 of each) as fp32
// into out[rows, k].
inline void mxfp4_decode_rows(const uint8_t* w, int64_t row_bytes, int64_t blocks, int64_t rows, int64_t k, float* out) {
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w + r * row_bytes;
        const auto* scales = reinterpret_cast<const float*>(row + blocks * 16);
        for (int64_t kk = 0; kk < k; kk += 16) _mm512_storeu_ps(out + r * k + kk, mxfp4_values(row, scales, kk));
    }
}

}  // namespace deepinfer::kernels::cpu::avx512
