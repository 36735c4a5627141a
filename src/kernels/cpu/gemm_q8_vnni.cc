// Q8 (or MXFP4) x Q8 dot products with AVX-512 VNNI: one vpdpbusd multiplies 64 unsigned weight
// codes (code + 128) by 64 signed activation codes into 16 int32 lanes of 4 products each;
// starting the lanes from -128 times the activation codes' sums makes every lane the exact signed
// dot product. MXFP4 codes become such bytes through a 16-entry table (twice each e2m1 value, an
// integer, + 128; core/quant_mxfp4.h).
// Lanes 0-7 hold one block, 8-15 the next; each lane is scaled by its block's weight scale times
// activation scale and summed in fp32. A row's result depends only on its own data, so it is the
// same whatever tile shape or batch computes it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "core/quant_mxfp4.h"
#include "core/quant_q8.h"
#include "kernels/cpu/gemm_q8.h"
#include "kernels/cpu/tile_loop.h"

namespace deepinfer::kernels::cpu {
namespace {

// The two block scales at `s` spread over the lanes of their blocks (lanes 0-7, 8-15).
inline __m512 block_scales(const float* s) {
    const __m512i pick = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    __m128 pair = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(s)));
    return _mm512_permutexvar_ps(pick, _mm512_castps128_ps512(pair));
}

// The weight codes of 2 blocks as unsigned bytes code + 128, per format; code_bytes: per block.
template <DType F>
struct Codes;
template <>
struct Codes<DType::kQ8> {
    static constexpr int64_t code_bytes = 32;
    static __m512i load(const uint8_t* p) { return _mm512_loadu_si512(p); }
};
template <>
struct Codes<DType::kMxfp4> {
    static constexpr int64_t code_bytes = 16;
    static __m512i load(const uint8_t* p) {
        const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(
            static_cast<char>(128), static_cast<char>(129), static_cast<char>(130), static_cast<char>(131),
            static_cast<char>(132), static_cast<char>(134), static_cast<char>(136), static_cast<char>(140),
            static_cast<char>(128), static_cast<char>(127), static_cast<char>(126), static_cast<char>(125),
            static_cast<char>(124), static_cast<char>(122), static_cast<char>(120), static_cast<char>(116)));
        const __m256i nibble = _mm256_set1_epi8(0x0F);
        __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        __m256i lo = _mm256_and_si256(packed, nibble), hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble);
        return _mm512_shuffle_epi8(table, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
    }
};

template <DType F, int MR, int NR>
void tile(const GemmArgs& a, const Q8Activations& xq, const uint8_t* w, int64_t wstride, float* y) {
    using C = Codes<F>;
    int64_t chunks = xq.blocks / 2;
    const float* wscale[NR];
    for (int j = 0; j < NR; ++j) wscale[j] = reinterpret_cast<const float*>(w + j * wstride + xq.blocks * C::code_bytes);
    __m512 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
        __m512i wv[NR];
        __m512 ws[NR];
        for (int j = 0; j < NR; ++j) {
            // The next row block, one tile ahead: the hardware prefetchers alone leave the
            // streams of a GEMV short of the memory bandwidth.
            _mm_prefetch(reinterpret_cast<const char*>(w + (j + NR) * wstride + c * 2 * C::code_bytes), _MM_HINT_T0);
            wv[j] = C::load(w + j * wstride + c * 2 * C::code_bytes);
            ws[j] = block_scales(wscale[j] + c * 2);
        }
        for (int i = 0; i < MR; ++i) {
            __m512i xv = _mm512_loadu_si512(xq.codes(i) + c * 64);
            __m512i corr = _mm512_loadu_si512(xq.lane_corrections(i) + c * 16);
            __m512 xs = _mm512_loadu_ps(xq.lane_scales(i) + c * 16);
            for (int j = 0; j < NR; ++j) {
                __m512i dot = _mm512_dpbusd_epi32(corr, wv[j], xv);
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(ws[j], xs), acc[i][j]);
            }
        }
    }
    for (int i = 0; i < MR; ++i) {
        for (int j = 0; j < NR; ++j) {
            float s = _mm512_reduce_add_ps(acc[i][j]);
            float& out = y[i * a.ldy + j];
            out = a.accumulate ? out + s : s;
        }
    }
}

template <DType F>
void rows(const GemmArgs& a, const Q8Activations& xq, int64_t wstride, int64_t n_begin, int64_t n_end) {
    const auto* w = static_cast<const uint8_t*>(a.w);
    auto at = [&]<int MR, int NR>(int64_t i, int64_t j) {
        tile<F, MR, NR>(a, xq.from_row(i), w + j * wstride, wstride, a.y + i * a.ldy + j);
    };
    // A lone activation row streams the weights: more rows in flight hide more memory latency.
    if (a.m == 1) return for_each_tile<1, 8>(a.m, n_begin, n_end, at);
    for_each_tile<4, 4>(a.m, n_begin, n_end, at);
}

}  // namespace

void gemm_q8_rows_vnni(const GemmArgs& args, const Q8Activations& xq, int64_t n_begin, int64_t n_end) {
    if (args.w_dtype == DType::kMxfp4)
        rows<DType::kMxfp4>(args, xq, mxfp4::row_bytes(args.k), n_begin, n_end);
    else
        rows<DType::kQ8>(args, xq, q8::row_bytes(args.k), n_begin, n_end);
}

}  // namespace deepinfer::kernels::cpu
