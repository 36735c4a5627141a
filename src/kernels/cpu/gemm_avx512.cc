// AVX-512 GEMM: register tiles of up to 4 activation rows x 4 weight rows, 16 lanes along k.
// bf16 weights widen to fp32 in registers (a 16-bit shift), MXFP4 ones decode there (a 16-entry
// table of e2m1 values times the block's power-of-two scale) and FP8 ones too (fp8_avx512.h), all
// exactly, so accumulation is exact fp32 FMA and a MXFP4 or FP8 product has the bits of the same
// product over the widened weights.
// GCC 12's AVX-512 headers build results from _mm512_undefined_*(), which -Wall reports as
// uninitialised (GCC bug 105593); the warnings are about the header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/quant_mxfp4.h"
#include "core/quant_q8.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/fp8_avx512.h"
#include "kernels/cpu/mxfp4_avx512.h"
#include "kernels/cpu/tile_loop.h"

namespace deepinfer::kernels::cpu {
namespace {

inline float hsum(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

template <int MR, int NR>
void zero_tile(__m512 (&acc)[MR][NR]) {
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
}

// Each accumulator's lanes summed into its output (added to it when accumulating).
template <int MR, int NR>
void store_tile(const GemmArgs& a, __m512 (&acc)[MR][NR], float* y) {
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) {
            float s = hsum(acc[i][j]);
            float& out = y[i * a.ldy + j];
            out = a.accumulate ? out + s : s;
        }
}

// Weight rows of one dtype: 16 values of row j from column kk as fp32 lanes.
struct Bf16Rows {
    static constexpr bool kDecodes = false;
    const uint16_t* w;
    int64_t ld;
    Bf16Rows from(int64_t j) const { return {w + j * ld, ld}; }
    const void* at(int64_t j, int64_t kk) const { return w + j * ld + kk; }
    __m512 load(int64_t j, int64_t kk) const {
        __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * ld + kk));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
    }
    __m512 load_masked(int64_t j, int64_t kk, __mmask16 m) const {
        __m256i v = _mm256_maskz_loadu_epi16(m, w + j * ld + kk);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
    }
};

struct F32Rows {
    static constexpr bool kDecodes = false;
    const float* w;
    int64_t ld;
    F32Rows from(int64_t j) const { return {w + j * ld, ld}; }
    const void* at(int64_t j, int64_t kk) const { return w + j * ld + kk; }
    __m512 load(int64_t j, int64_t kk) const { return _mm512_loadu_ps(w + j * ld + kk); }
    __m512 load_masked(int64_t j, int64_t kk, __mmask16 m) const { return _mm512_maskz_loadu_ps(m, w + j * ld + kk); }
};

// core/quant_mxfp4.h: per pair of 32-blocks, 32 code bytes (the first block's inputs in the low
// nibbles, the second's in the high ones); then each block's scale, halved. k is a multiple of 32.
struct Mxfp4Rows {
    static constexpr bool kDecodes = true;
    const uint8_t* w;
    int64_t stride, blocks;
    Mxfp4Rows from(int64_t j) const { return {w + j * stride, stride, blocks}; }
    void decode(int64_t rows, int64_t k, float* out) const { avx512::mxfp4_decode_rows(w, stride, blocks, rows, k, out); }
};

// core/quant_fp8.h: k codes, then a scale exponent per 32 inputs; k is a multiple of 32.
struct Fp8Rows {
    static constexpr bool kDecodes = true;
    const uint8_t* w;
    int64_t stride, k;
    Fp8Rows from(int64_t j) const { return {w + j * stride, stride, k}; }
    void decode(int64_t rows, int64_t, float* out) const {
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t kk = 0; kk < k; kk += 32) {
                __m512 lo, hi;
                avx512::fp8_values(w + r * stride, k, kk, lo, hi);
                _mm512_storeu_ps(out + r * k + kk, lo);
                _mm512_storeu_ps(out + r * k + kk + 16, hi);
            }
    }
};

template <int MR, int NR, typename Rows>
void tile(const GemmArgs& a, const float* x, const Rows& w, float* y) {
    __m512 acc[MR][NR];
    zero_tile<MR, NR>(acc);
    int64_t kk = 0;
    for (; kk + 16 <= a.k; kk += 16) {
        __m512 wv[NR];
        for (int j = 0; j < NR; ++j) {
            // The next row block, one tile ahead (see gemm_q8_vnni.cc).
            _mm_prefetch(static_cast<const char*>(w.at(j + NR, kk)), _MM_HINT_T0);
            wv[j] = w.load(j, kk);
        }
        for (int i = 0; i < MR; ++i) {
            __m512 xv = _mm512_loadu_ps(x + i * a.lda + kk);
            for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    if (kk < a.k) {
        __mmask16 mask = static_cast<__mmask16>((1u << (a.k - kk)) - 1);
        __m512 wv[NR];
        for (int j = 0; j < NR; ++j) wv[j] = w.load_masked(j, kk, mask);
        for (int i = 0; i < MR; ++i) {
            __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * a.lda + kk);
            for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    store_tile<MR, NR>(a, acc, y);
}

// MXFP4 weight rows for few activation rows (decode): each pair of blocks (64 values in 32 bytes)
// is split into nibbles once per row, then 16 values at a time are a widening, a table lookup and
// a multiply by the block's scale away, in the order the other tiles sum k (same bits as widened).
template <int MR, int NR>
void tile(const GemmArgs& a, const float* x, const Mxfp4Rows& w, float* y) {
    const __m512 table = avx512::twice_e2m1();
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    __m512 acc[MR][NR];
    zero_tile<MR, NR>(acc);
    for (int64_t kk = 0; kk < a.k; kk += 64) {
        __m256i lo[NR], hi[NR];
        const float* scale[NR];
        for (int j = 0; j < NR; ++j) {
            const uint8_t* row = w.w + j * w.stride;
            _mm_prefetch(reinterpret_cast<const char*>(row + NR * w.stride + kk / 2), _MM_HINT_T0);
            __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + kk / 2));
            lo[j] = _mm256_and_si256(bytes, nibble);
            hi[j] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
            scale[j] = reinterpret_cast<const float*>(row + w.blocks * 16) + kk / 32;
        }
        int quarters = a.k - kk >= 64 ? 4 : 2;  // k is a multiple of 32
        for (int q = 0; q < quarters; ++q) {
            __m512 wv[NR];
            for (int j = 0; j < NR; ++j) {
                __m256i src = q < 2 ? lo[j] : hi[j];
                __m128i part = q % 2 == 0 ? _mm256_castsi256_si128(src) : _mm256_extracti128_si256(src, 1);
                wv[j] = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(part), table),
                                      _mm512_set1_ps(scale[j][q / 2]));
            }
            for (int i = 0; i < MR; ++i) {
                __m512 xv = _mm512_loadu_ps(x + i * a.lda + kk + 16 * q);
                for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
            }
        }
    }
    store_tile<MR, NR>(a, acc, y);
}

// FP8 weight rows for few activation rows: 32 codes of a row decoded at a time (fp8_avx512.h),
// summed in the order the other tiles sum k (same bits as widened).
template <int MR, int NR>
void tile(const GemmArgs& a, const float* x, const Fp8Rows& w, float* y) {
    __m512 acc[MR][NR];
    zero_tile<MR, NR>(acc);
    for (int64_t kk = 0; kk < a.k; kk += 32) {
        __m512 lo[NR], hi[NR];
        for (int j = 0; j < NR; ++j) {
            const uint8_t* row = w.w + j * w.stride;
            _mm_prefetch(reinterpret_cast<const char*>(row + NR * w.stride + kk), _MM_HINT_T0);
            avx512::fp8_values(row, w.k, kk, lo[j], hi[j]);
        }
        for (int i = 0; i < MR; ++i) {
            __m512 x0 = _mm512_loadu_ps(x + i * a.lda + kk), x1 = _mm512_loadu_ps(x + i * a.lda + kk + 16);
            for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(x1, hi[j], _mm512_fmadd_ps(x0, lo[j], acc[i][j]));
        }
    }
    store_tile<MR, NR>(a, acc, y);
}

// Activation rows beyond which a block of MXFP4 or FP8 weight rows is decoded once into fp32 for
// all of them (the same values, so the same bits) rather than in every register tile.
constexpr int64_t kDecodeOnceRows = 4;

template <typename Rows>
void rows(const GemmArgs& a, const Rows& w, int64_t n_begin, int64_t n_end) {
    if constexpr (Rows::kDecodes) {
        if (a.m > kDecodeOnceRows) {
            thread_local std::vector<float> decoded;
            decoded.resize(static_cast<size_t>(4 * a.k));
            for (int64_t j = n_begin; j < n_end; j += 4) {
                int64_t nr = std::min<int64_t>(4, n_end - j);
                w.from(j).decode(nr, a.k, decoded.data());
                GemmArgs sub = a;
                sub.y = a.y + j;
                rows(sub, F32Rows{decoded.data(), a.k}, 0, nr);
            }
            return;
        }
    }
    for_each_tile<4, 4>(a.m, n_begin, n_end, [&]<int MR, int NR>(int64_t i, int64_t j) {
        tile<MR, NR>(a, a.x + i * a.lda, w.from(j), a.y + i * a.ldy + j);
    });
}

}  // namespace

void gemm_rows_avx512(const GemmArgs& args, int64_t n_begin, int64_t n_end) {
    switch (args.w_dtype) {
        case DType::kBF16: return rows(args, Bf16Rows{static_cast<const uint16_t*>(args.w), args.ldw}, n_begin, n_end);
        case DType::kMxfp4:
            return rows(args,
                        Mxfp4Rows{static_cast<const uint8_t*>(args.w), mxfp4::row_bytes(args.k), q8::padded_blocks(args.k)},
                        n_begin, n_end);
        case DType::kFp8:
            return rows(args, Fp8Rows{static_cast<const uint8_t*>(args.w), fp8::row_bytes(args.k), args.k}, n_begin, n_end);
        default: return rows(args, F32Rows{static_cast<const float*>(args.w), args.ldw}, n_begin, n_end);
    }
}

}  // namespace deepinfer::kernels::cpu
