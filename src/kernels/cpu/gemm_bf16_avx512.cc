// AVX-512 BF16 GEMM: register tiles of up to 4 activation rows x 4 weight rows, 32 bf16 pairs
// along k per vdpbf16ps. MXFP4 and FP8 weights are decoded to bf16 exactly: in registers for few activation
// rows, a block of rows at a time into memory for more. Each (row, weight row) accumulator sees k
// in the same order whatever the tile shape, so a row's result does not depend on the batch around it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/dtype.h"
#include "core/quant_mxfp4.h"
#include "core/quant_q8.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/fp8_avx512.h"
#include "kernels/cpu/mxfp4_avx512.h"
#include "kernels/cpu/tile_loop.h"

namespace deepinfer::kernels::cpu {
namespace {

inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

// Twice each e2m1 value (core/quant_mxfp4.h stores the scales halved) as bf16 bits less those of
// 1.0 (zeros kept), twice over for a 32-entry word permute: adding a power-of-two scale's bf16
// bits to a nonzero entry gives the scaled value's.
alignas(64) constexpr uint16_t kTwiceE2m1Bf16Unscaled[32] = {
    0x0000, 0x0000, 0x0080, 0x00C0, 0x0100, 0x0140, 0x0180, 0x01C0, 0x8000, 0x8000, 0x8080, 0x80C0, 0x8100, 0x8140, 0x8180, 0x81C0,
    0x0000, 0x0000, 0x0080, 0x00C0, 0x0100, 0x0140, 0x0180, 0x01C0, 0x8000, 0x8000, 0x8080, 0x80C0, 0x8100, 0x8140, 0x8180, 0x81C0};

// Block kk / 32 of a packed MXFP4 row as 32 bf16 values: a table lookup of the codes, then the
// scale's bf16 bits added to the nonzero ones (the scale is a power of two that keeps every value
// normal: mxfp4::packable). Every value is exact, so these are the bits of the weights widened at
// load.
inline __m512bh mxfp4_block_bf16(const uint8_t* row, int64_t blocks, int64_t kk) {
    __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + (kk / 64) * 32));
    if (kk % 64 != 0) bytes = _mm256_srli_epi16(bytes, 4);
    __m512i codes = _mm512_cvtepu8_epi16(_mm256_and_si256(bytes, _mm256_set1_epi8(0x0F)));
    __m512i values = _mm512_permutexvar_epi16(codes, _mm512_load_si512(kTwiceE2m1Bf16Unscaled));
    const auto* scale_bf16 = reinterpret_cast<const int16_t*>(row + blocks * 16 + kk / 32 * 4) + 1;  // upper half
    __mmask32 nonzero = _mm512_test_epi16_mask(codes, _mm512_set1_epi16(7));
    return as_bh(_mm512_mask_add_epi16(values, nonzero, values, _mm512_set1_epi16(*scale_bf16)));
}

// Weight rows of one format, 32 values of row j from column kk as bf16.
struct Bf16Weights {
    const uint16_t* w;
    int64_t ld;
    Bf16Weights from(int64_t j) const { return {w + j * ld, ld}; }
    const void* at(int64_t j, int64_t kk) const { return w + j * ld + kk; }
    __m512bh load(int64_t j, int64_t kk) const { return as_bh(_mm512_loadu_si512(w + j * ld + kk)); }
    __m512bh load_masked(int64_t j, int64_t kk, __mmask32 m) const {
        return as_bh(_mm512_maskz_loadu_epi16(m, w + j * ld + kk));
    }
};

// MXFP4 rows decoded in registers, a 32-block per load (k is a multiple of 32: no masked loads).
struct Mxfp4Weights {
    const uint8_t* w;
    int64_t stride, blocks;
    Mxfp4Weights from(int64_t j) const { return {w + j * stride, stride, blocks}; }
    const void* at(int64_t j, int64_t kk) const { return w + j * stride + kk / 2; }
    __m512bh load(int64_t j, int64_t kk) const { return mxfp4_block_bf16(w + j * stride, blocks, kk); }
    __m512bh load_masked(int64_t j, int64_t kk, __mmask32) const { return load(j, kk); }
};

// FP8 rows (core/quant_fp8.h) decoded in registers: the codes' bf16 bits, then the exponent of the
// block's power-of-two scale added to the nonzero ones' (fp8::pack keeps only scales that leave
// every value normal), so these are the bits of the weights widened at load.
struct Fp8Weights {
    const uint8_t* w;
    int64_t stride, k;
    Fp8Weights from(int64_t j) const { return {w + j * stride, stride, k}; }
    const void* at(int64_t j, int64_t kk) const { return w + j * stride + kk; }
    __m512bh load(int64_t j, int64_t kk) const {
        const uint8_t* row = w + j * stride;
        __m512i codes = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + kk)));
        __m512i values = avx512::e4m3_to_bf16(codes);
        __m512i delta = _mm512_set1_epi16(static_cast<int16_t>((avx512::fp8_scale_exponent(row, k, kk) - 127) * 128));
        __mmask32 nonzero = _mm512_test_epi16_mask(codes, _mm512_set1_epi16(0x7F));
        return as_bh(_mm512_mask_add_epi16(values, nonzero, values, delta));
    }
    __m512bh load_masked(int64_t j, int64_t kk, __mmask32) const { return load(j, kk); }
};

template <int MR, int NR, typename Weights>
void tile(const GemmArgs& a, const Bf16Activations& xb, const Weights& w, float* y) {
    __m512 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk + 32 <= a.k; kk += 32) {
        __m512bh wv[NR];
        for (int j = 0; j < NR; ++j) {
            // The next row block, one tile ahead (see gemm_q8_vnni.cc).
            _mm_prefetch(static_cast<const char*>(w.at(j + NR, kk)), _MM_HINT_T0);
            wv[j] = w.load(j, kk);
        }
        for (int i = 0; i < MR; ++i) {
            __m512bh xv = as_bh(_mm512_loadu_si512(xb.row(i) + kk));
            for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
        }
    }
    if (kk < a.k) {  // the activation rows are zero-filled past k; the weight rows are not
        __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (a.k - kk)) - 1);
        __m512bh wv[NR];
        for (int j = 0; j < NR; ++j) wv[j] = w.load_masked(j, kk, mask);
        for (int i = 0; i < MR; ++i) {
            __m512bh xv = as_bh(_mm512_loadu_si512(xb.row(i) + kk));
            for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
        }
    }
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) {
            float s = hsum(acc[i][j]);
            float& out = y[i * a.ldy + j];
            out = a.accumulate ? out + s : s;
        }
}

template <typename Weights>
void rows(const GemmArgs& a, const Bf16Activations& xb, const Weights& w, int64_t n_begin, int64_t n_end) {
    for_each_tile<4, 4>(a.m, n_begin, n_end, [&]<int MR, int NR>(int64_t i, int64_t j) {
        tile<MR, NR>(a, xb.from_row(i), w.from(j), a.y + i * a.ldy + j);
    });
}

// Activation rows beyond which a block of 4 MXFP4 or FP8 weight rows is decoded once into bf16
// for all of them (the same values, so the same bits) rather than in every register tile.
constexpr int64_t kDecodeOnceRows = 4;

// Rows [j, j + nr) of weights decoded on the fly, for all activation rows: in registers for few
// of them, once into bf16 for more.
template <typename Weights>
void decoded_row_block(const GemmArgs& a, const Bf16Activations& xb, const Weights& w, int64_t j, int64_t nr) {
    if (a.m <= kDecodeOnceRows) return rows(a, xb, w, j, j + nr);
    thread_local std::vector<uint16_t> decoded;
    decoded.resize(static_cast<size_t>(4 * a.k));
    for (int64_t r = 0; r < nr; ++r)
        for (int64_t kk = 0; kk < a.k; kk += 32) {
            __m512bh v = w.load(j + r, kk);
            _mm512_storeu_si512(decoded.data() + r * a.k + kk, reinterpret_cast<__m512i&>(v));
        }
    GemmArgs sub = a;
    sub.y = a.y + j;
    rows(sub, xb, Bf16Weights{decoded.data(), a.k}, 0, nr);
}

void mxfp4_rows(const GemmArgs& a, const Bf16Activations& xb, int64_t n_begin, int64_t n_end) {
    Mxfp4Weights w{static_cast<const uint8_t*>(a.w), mxfp4::row_bytes(a.k), q8::padded_blocks(a.k)};
    for (int64_t j = n_begin; j < n_end; j += 4) decoded_row_block(a, xb, w, j, std::min<int64_t>(4, n_end - j));
}

void fp8_rows(const GemmArgs& a, const Bf16Activations& xb, int64_t n_begin, int64_t n_end) {
    Fp8Weights w{static_cast<const uint8_t*>(a.w), fp8::row_bytes(a.k), a.k};
    for (int64_t j = n_begin; j < n_end; j += 4) decoded_row_block(a, xb, w, j, std::min<int64_t>(4, n_end - j));
}

}  // namespace

void gemm_bf16_rows_avx512(const GemmArgs& a, const Bf16Activations& xb, int64_t n_begin, int64_t n_end) {
    if (a.w_dtype == DType::kMxfp4) return mxfp4_rows(a, xb, n_begin, n_end);
    if (a.w_dtype == DType::kFp8) return fp8_rows(a, xb, n_begin, n_end);
    rows(a, xb, Bf16Weights{static_cast<const uint16_t*>(a.w), a.ldw}, n_begin, n_end);
}

void round_activations_bf16_avx512(const float* x, int64_t lda, int64_t k, int64_t begin, int64_t end, uint16_t* out) {
    int64_t stride = bf16_activation_stride(k);
    for (int64_t r = begin; r < end; ++r) {
        const float* in = x + r * lda;
        uint16_t* o = out + r * stride;
        for (int64_t i = 0; i < stride; i += 32) {
            int64_t left = std::max<int64_t>(0, k - i);
            __mmask16 lo = static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << left) - 1);
            __mmask16 hi = static_cast<__mmask16>(left >= 32 ? 0xFFFF : left > 16 ? (1u << (left - 16)) - 1 : 0);
            __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, in + i + 16), _mm512_maskz_loadu_ps(lo, in + i));
            _mm512_storeu_si512(o + i, reinterpret_cast<__m512i&>(v));
        }
    }
}

}  // namespace deepinfer::kernels::cpu
