#pragma once
// FP8 weight rows (core/quant_fp8.h) decoded with AVX-512: e4m3 codes become the bf16 bits of
// their values by integer arithmetic (every e4m3 value is exact in bf16), subnormal codes through
// an 8-entry table. For the AVX-512 translation units only.
#include <immintrin.h>

#include <cstdint>

#include "core/quant_fp8.h"

namespace deepinfer::kernels::cpu::avx512 {

// bf16 bits of m * 2^-9 for the subnormal codes m = 0..7.
inline __m512i e4m3_subnormals_bf16() {
    return _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0x3C603C403C203C00LL, 0x3BC03B803B000000LL);
}

// Codes widened to 16 bits -> bf16 bits of their values: sign, then exponent + (127 - 7) and the
// three mantissa bits for normal codes.
inline __m512i e4m3_to_bf16(__m512i codes) {
    __m512i magnitude = _mm512_and_si512(codes, _mm512_set1_epi16(0x7F));
    __m512i v = _mm512_add_epi16(_mm512_slli_epi16(magnitude, 4), _mm512_set1_epi16(120 << 7));
    __mmask32 subnormal = _mm512_cmplt_epu16_mask(magnitude, _mm512_set1_epi16(8));
    v = _mm512_mask_permutexvar_epi16(v, subnormal, magnitude, e4m3_subnormals_bf16());
    return _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(codes, _mm512_set1_epi16(0x80)), 8));
}

// 32 codes of a packed row from column kk, as bf16 bits (unscaled).
inline __m512i fp8_block_bf16(const uint8_t* row, int64_t kk) {
    return e4m3_to_bf16(_mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + kk))));
}

// The E8M0 exponent byte of column kk's scale in a packed row of k codes.
inline int fp8_scale_exponent(const uint8_t* row, int64_t k, int64_t kk) { return row[k + kk / fp8::kScaleColumns]; }

// Values [kk, kk + 32) of a packed row as fp32 in two halves, scaled (exact: the scale keeps them
// normal).
inline void fp8_values(const uint8_t* row, int64_t k, int64_t kk, __m512& lo, __m512& hi) {
    __m512i bf16 = fp8_block_bf16(row, kk);
    __m512 scale = _mm512_castsi512_ps(_mm512_set1_epi32(fp8_scale_exponent(row, k, kk) << 23));
    auto widen = [](__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); };
    lo = _mm512_mul_ps(widen(_mm512_castsi512_si256(bf16)), scale);
    hi = _mm512_mul_ps(widen(_mm512_extracti64x4_epi64(bf16, 1)), scale);
}

}  // namespace deepinfer::kernels::cpu::avx512
