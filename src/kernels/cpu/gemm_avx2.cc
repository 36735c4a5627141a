// AVX2 GEMM: register tiles of up to 4 activation rows x 3 weight rows, 8 lanes along k; the k
// remainder (k % 8) is finished in scalar code.
#include <immintrin.h>

#include <algorithm>

#include "core/dtype.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/tile_loop.h"

namespace deepinfer::kernels::cpu {
namespace {

inline __m256 load_w(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
inline __m256 load_w(const float* p) { return _mm256_loadu_ps(p); }
inline float scalar_w(const uint16_t* p) { return bf16_to_f32(*p); }
inline float scalar_w(const float* p) { return *p; }

inline float hsum(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

template <int MR, int NR, typename W>
void tile(const GemmArgs& a, const float* x, const W* w, float* y) {
    __m256 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
    int64_t kk = 0;
    for (; kk + 8 <= a.k; kk += 8) {
        __m256 wv[NR];
        for (int j = 0; j < NR; ++j) wv[j] = load_w(w + j * a.ldw + kk);
        for (int i = 0; i < MR; ++i) {
            __m256 xv = _mm256_loadu_ps(x + i * a.lda + kk);
            for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < MR; ++i) {
        for (int j = 0; j < NR; ++j) {
            float s = hsum(acc[i][j]);
            for (int64_t r = kk; r < a.k; ++r) s += x[i * a.lda + r] * scalar_w(w + j * a.ldw + r);
            float& out = y[i * a.ldy + j];
            out = a.accumulate ? out + s : s;
        }
    }
}

template <typename W>
void rows(const GemmArgs& a, int64_t n_begin, int64_t n_end) {
    const W* w = static_cast<const W*>(a.w);
    for_each_tile<4, 3>(a.m, n_begin, n_end, [&]<int MR, int NR>(int64_t i, int64_t j) {
        tile<MR, NR>(a, a.x + i * a.lda, w + j * a.ldw, a.y + i * a.ldy + j);
    });
}

}  // namespace

void gemm_rows_avx2(const GemmArgs& args, int64_t n_begin, int64_t n_end) {
    if (args.w_dtype == DType::kMxfp4 || args.w_dtype == DType::kFp8)
        return gemm_rows_scalar(args, n_begin, n_end);  // AVX-512 decodes them
    if (args.w_dtype == DType::kBF16)
        rows<uint16_t>(args, n_begin, n_end);
    else
        rows<float>(args, n_begin, n_end);
}

}  // namespace deepinfer::kernels::cpu
