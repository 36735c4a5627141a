// AVX-512 GEMM: register tiles of up to 4 activation rows x 4 weight rows, 16 lanes along k.
// bf16 weights widen to fp32 in registers (a 16-bit shift), so accumulation is exact fp32 FMA.
// GCC 12's AVX-512 headers build results from _mm512_undefined_*(), which -Wall reports as
// uninitialised (GCC bug 105593); the warnings are about the header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/gemm.h"

namespace deepinfer::kernels::cpu {
namespace {

inline __m512 load_w(const uint16_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
inline __m512 load_w_masked(const uint16_t* p, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
inline __m512 load_w(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load_w_masked(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }

inline float hsum(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

template <int MR, int NR, typename W>
void tile(const GemmArgs& a, const float* x, const W* w, float* y) {
    __m512 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk + 16 <= a.k; kk += 16) {
        __m512 wv[NR];
        for (int j = 0; j < NR; ++j) {
            // The next row block, one tile ahead (see gemm_q8_vnni.cc).
            _mm_prefetch(reinterpret_cast<const char*>(w + (j + NR) * a.ldw + kk), _MM_HINT_T0);
            wv[j] = load_w(w + j * a.ldw + kk);
        }
        for (int i = 0; i < MR; ++i) {
            __m512 xv = _mm512_loadu_ps(x + i * a.lda + kk);
            for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    if (kk < a.k) {
        __mmask16 mask = static_cast<__mmask16>((1u << (a.k - kk)) - 1);
        __m512 wv[NR];
        for (int j = 0; j < NR; ++j) wv[j] = load_w_masked(w + j * a.ldw + kk, mask);
        for (int i = 0; i < MR; ++i) {
            __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * a.lda + kk);
            for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < MR; ++i) {
        for (int j = 0; j < NR; ++j) {
            float s = hsum(acc[i][j]);
            float& out = y[i * a.ldy + j];
            out = a.accumulate ? out + s : s;
        }
    }
}

template <int MR, typename W>
void row_block(const GemmArgs& a, const float* x, const W* w, float* y, int64_t nr) {
    switch (nr) {
        case 4: return tile<MR, 4>(a, x, w, y);
        case 3: return tile<MR, 3>(a, x, w, y);
        case 2: return tile<MR, 2>(a, x, w, y);
        default: return tile<MR, 1>(a, x, w, y);
    }
}

template <typename W>
void rows(const GemmArgs& a, int64_t n_begin, int64_t n_end) {
    const W* w = static_cast<const W*>(a.w);
    for (int64_t j = n_begin; j < n_end; j += 4) {
        int64_t nr = std::min<int64_t>(4, n_end - j);
        const W* wj = w + j * a.ldw;
        for (int64_t i = 0; i < a.m; i += 4) {
            const float* x = a.x + i * a.lda;
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

}  // namespace

void gemm_rows_avx512(const GemmArgs& args, int64_t n_begin, int64_t n_end) {
    if (args.w_dtype == DType::kBF16)
        rows<uint16_t>(args, n_begin, n_end);
    else
        rows<float>(args, n_begin, n_end);
}

}  // namespace deepinfer::kernels::cpu
