// AVX-512 BF16 GEMM: register tiles of up to 4 activation rows x 4 weight rows, 32 bf16 pairs
// along k per vdpbf16ps; MXFP4 weights are decoded to bf16 (exactly) a block of rows at a time. Each (row, weight row) accumulator sees k in the same order whatever the
// tile shape, so a row's result does not depend on the batch around it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/quant_mxfp4.h"
#include "core/quant_q8.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/mxfp4_avx512.h"

namespace deepinfer::kernels::cpu {
namespace {

inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

template <int MR, int NR>
void tile(const GemmArgs& a, const Bf16Activations& xb, const uint16_t* w, float* y) {
    __m512 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk + 32 <= a.k; kk += 32) {
        __m512bh wv[NR];
        for (int j = 0; j < NR; ++j) {
            // The next row block, one tile ahead (see gemm_q8_vnni.cc).
            _mm_prefetch(reinterpret_cast<const char*>(w + (j + NR) * a.ldw + kk), _MM_HINT_T0);
            wv[j] = as_bh(_mm512_loadu_si512(w + j * a.ldw + kk));
        }
        for (int i = 0; i < MR; ++i) {
            __m512bh xv = as_bh(_mm512_loadu_si512(xb.row(i) + kk));
            for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
        }
    }
    if (kk < a.k) {  // the activation rows are zero-filled past k; the weight rows are not
        __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (a.k - kk)) - 1);
        __m512bh wv[NR];
        for (int j = 0; j < NR; ++j) wv[j] = as_bh(_mm512_maskz_loadu_epi16(mask, w + j * a.ldw + kk));
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

template <int MR>
void row_block(const GemmArgs& a, const Bf16Activations& xb, const uint16_t* w, float* y, int64_t nr) {
    switch (nr) {
        case 4: return tile<MR, 4>(a, xb, w, y);
        case 3: return tile<MR, 3>(a, xb, w, y);
        case 2: return tile<MR, 2>(a, xb, w, y);
        default: return tile<MR, 1>(a, xb, w, y);
    }
}

}  // namespace

namespace {

// MXFP4 weights: each block of 4 rows decoded once into bf16 (exact) for all activation rows.
void mxfp4_rows(const GemmArgs& a, const Bf16Activations& xb, int64_t n_begin, int64_t n_end) {
    thread_local std::vector<float> values;
    thread_local std::vector<uint16_t> decoded;
    values.resize(static_cast<size_t>(4 * a.k));
    decoded.resize(static_cast<size_t>(4 * a.k));
    int64_t stride = mxfp4::row_bytes(a.k), blocks = q8::padded_blocks(a.k);
    for (int64_t j = n_begin; j < n_end; j += 4) {
        int64_t nr = std::min<int64_t>(4, n_end - j);
        avx512::mxfp4_decode_rows(static_cast<const uint8_t*>(a.w) + j * stride, stride, blocks, nr, a.k, values.data());
        for (int64_t i = 0; i < nr * a.k; i += 32) {
            __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(values.data() + i + 16), _mm512_loadu_ps(values.data() + i));
            _mm512_storeu_si512(decoded.data() + i, reinterpret_cast<__m512i&>(v));
        }
        GemmArgs sub = a;
        sub.w = decoded.data();
        sub.w_dtype = DType::kBF16;
        sub.ldw = a.k;
        sub.y = a.y + j;
        gemm_bf16_rows_avx512(sub, xb, 0, nr);
    }
}

}  // namespace

void gemm_bf16_rows_avx512(const GemmArgs& a, const Bf16Activations& xb, int64_t n_begin, int64_t n_end) {
    if (a.w_dtype == DType::kMxfp4) return mxfp4_rows(a, xb, n_begin, n_end);
    const auto* w = static_cast<const uint16_t*>(a.w);
    for (int64_t j = n_begin; j < n_end; j += 4) {
        int64_t nr = std::min<int64_t>(4, n_end - j);
        const uint16_t* wj = w + j * a.ldw;
        for (int64_t i = 0; i < a.m; i += 4) {
            Bf16Activations x = xb.from_row(i);
            float* y = a.y + i * a.ldy + j;
            switch (std::min<int64_t>(4, a.m - i)) {
                case 4: row_block<4>(a, x, wj, y, nr); break;
                case 3: row_block<3>(a, x, wj, y, nr); break;
                case 2: row_block<2>(a, x, wj, y, nr); break;
                default: row_block<1>(a, x, wj, y, nr); break;
            }
        }
    }
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
