// AVX-512 bodies of attend.h: 16-lane accumulators along the head dimension, tiles of up to 4
// heads x 4 keys for the scores (two FMAs per load) and 4 heads x 64 dimensions for the values;
// bf16 keys widen in registers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/attend.h"

namespace deepinfer::kernels::cpu {
namespace {

inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1); }

// 16 key values from column c (masked) as fp32 lanes.
inline __m512 load_key(const float* row, int64_t c, __mmask16 m) { return _mm512_maskz_loadu_ps(m, row + c); }
inline __m512 load_key(const uint16_t* row, int64_t c, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + c)), 16));
}

template <int H, int K, typename Key>
void score_tile(const float* q, int64_t d, const Key* const* keys, float* scores, int64_t lds) {
    __m512 acc[H][K];
    for (int h = 0; h < H; ++h)
        for (int k = 0; k < K; ++k) acc[h][k] = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; c += 16) {
        __mmask16 m = tail_mask(d - c);
        __m512 kv[K];
        for (int k = 0; k < K; ++k) kv[k] = load_key(keys[k], c, m);
        for (int h = 0; h < H; ++h) {
            __m512 qv = _mm512_maskz_loadu_ps(m, q + h * d + c);
            for (int k = 0; k < K; ++k) acc[h][k] = _mm512_fmadd_ps(qv, kv[k], acc[h][k]);
        }
    }
    for (int h = 0; h < H; ++h)
        for (int k = 0; k < K; ++k) scores[h * lds + k] = _mm512_reduce_add_ps(acc[h][k]);
}

template <int H, typename Key>
void score_heads(const float* q, int64_t d, const Key* const* keys, int64_t n, float* scores, int64_t lds) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) score_tile<H, 4>(q, d, keys + j, scores + j, lds);
    for (; j < n; ++j) score_tile<H, 1>(q, d, keys + j, scores + j, lds);
}

template <int H, typename Key>
void value_heads(const float* p, int64_t n, const Key* const* keys, int64_t d, float* out) {
    for (int64_t c0 = 0; c0 < d; c0 += 64) {
        __mmask16 m[4];
        for (int v = 0; v < 4; ++v) m[v] = c0 + v * 16 < d ? tail_mask(d - c0 - v * 16) : 0;
        __m512 acc[H][4];
        for (int h = 0; h < H; ++h)
            for (int v = 0; v < 4; ++v) acc[h][v] = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; ++j) {
            __m512 kv[4];
            for (int v = 0; v < 4; ++v) kv[v] = load_key(keys[j], c0 + v * 16, m[v]);
            for (int h = 0; h < H; ++h) {
                __m512 pv = _mm512_set1_ps(p[h * n + j]);
                for (int v = 0; v < 4; ++v) acc[h][v] = _mm512_fmadd_ps(pv, kv[v], acc[h][v]);
            }
        }
        for (int h = 0; h < H; ++h)
            for (int v = 0; v < 4; ++v) _mm512_mask_storeu_ps(out + h * d + c0 + v * 16, m[v], acc[h][v]);
    }
}

template <typename Key>
void scores(const float* q, int64_t nh, int64_t d, const Key* const* keys, int64_t n, float* out) {
    int64_t h = 0;
    for (; h + 4 <= nh; h += 4) score_heads<4>(q + h * d, d, keys, n, out + h * n, n);
    for (; h < nh; ++h) score_heads<1>(q + h * d, d, keys, n, out + h * n, n);
}

template <typename Key>
void values(const float* p, int64_t nh, int64_t n, const Key* const* keys, int64_t d, float* out) {
    int64_t h = 0;
    for (; h + 4 <= nh; h += 4) value_heads<4>(p + h * n, n, keys, d, out + h * d);
    for (; h < nh; ++h) value_heads<1>(p + h * n, n, keys, d, out + h * d);
}

}  // namespace

void attend_scores_avx512(const float* q, int64_t nh, int64_t d, const float* const* keys, int64_t n, float* out) {
    scores(q, nh, d, keys, n, out);
}
void attend_scores_avx512(const float* q, int64_t nh, int64_t d, const uint16_t* const* keys, int64_t n, float* out) {
    scores(q, nh, d, keys, n, out);
}
void attend_values_avx512(const float* p, int64_t nh, int64_t n, const float* const* keys, int64_t d, float* out) {
    values(p, nh, n, keys, d, out);
}
void attend_values_avx512(const float* p, int64_t nh, int64_t n, const uint16_t* const* keys, int64_t d, float* out) {
    values(p, nh, n, keys, d, out);
}

}  // namespace deepinfer::kernels::cpu
