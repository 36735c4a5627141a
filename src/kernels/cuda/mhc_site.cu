// The mHC site kernel: a whole site (the previous site's stream update, the mixes, Sinkhorn,
// the collapse and its norm) in one launch over the token's split blocks.
#include "kernels/cuda/mhc_common.cuh"

namespace deepinfer::kernels::cuda {
namespace {

// One mHC site in one launch with every phase spread over the token's split blocks (hc = 4):
// block (split, token) owns kDotsThreads columns e of all four streams. Phase 1: the previous
// site's stream update there (y non-null; post/comb are the old site's), then partial sums of
// the 24 mix products and of the 10 stream Gram entries Σ_e x_j[e] x_k[e]. Every block waits for
// all the token's blocks' sums (all of them resident: the caller checks the grid fits the GPU at
// once), as tagged words or behind a barrier. Phase 2: every block adds the partials, computes
// pre, collapses its own columns from the values still in registers and normalises them:
// Σ_e collapsed[e]² = preᵀ G pre comes from the Gram sums, so no second pass over the row. Block
// 0's first warp runs the Sinkhorn (post/comb: every block has read the old ones before its sums
// went out).
constexpr int kGram = 10;  // (j, k), j <= k < 4
constexpr int kSiteParts = 24 + kGram;

constexpr int kMaxSiteSplits = 64;  // hidden sizes up to 64 x kDotsThreads

// Waits until all gridDim.x blocks of this grid row have arrived. The last to arrive puts the
// count back to zero and moves the row's generation on, which the others wait for (`seen`: the
// generation thread 0 read before arriving), so no second round of atomics is needed to reset.
__device__ void row_barrier(int* arrive, unsigned* generation, unsigned seen) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        if (atomicAdd(arrive, 1) == static_cast<int>(gridDim.x) - 1) {
            *arrive = 0;
            __threadfence();
            atomicExch(generation, seen + 1);
        } else {
            for (;;) {
                unsigned now;
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(generation) : "memory");
                if (now != seen) break;
                __nanosleep(32);
            }
        }
    }
    __syncthreads();
    __threadfence();
}

// Tagged exchange of the split blocks' partial sums: each value goes out as one 64-bit word, the
// float's bits low and the launch's tag high, so a reader knows a word is this launch's from the
// word itself. The blocks then need no barrier (fence, atomic arrival, a poll of the generation,
// then the loads of the sums): they poll the sums. Words of the buffer only ever hold tagged
// values; the tag is unique per launch until it wraps, when the buffer is cleared.
__device__ __forceinline__ void store_tagged(unsigned long long* p, float v, unsigned tag) {
    unsigned long long w = static_cast<unsigned long long>(tag) << 32 | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}

// all[i] = the value of words[i], i < count <= kMaxSiteSplits * kSiteParts, once it carries `tag`:
// every pending word of the thread is loaded in one round, then the round repeats for the late.
__device__ void gather_tagged(const unsigned long long* words, unsigned count, unsigned tag, float* all) {
    constexpr int kPerThread = (kMaxSiteSplits * kSiteParts + kDotsThreads - 1) / kDotsThreads;
    static_assert(kPerThread <= 32, "pending words are a 32-bit mask");
    unsigned pending = 0;
    for (int i = 0; i < kPerThread; ++i)
        if (threadIdx.x + i * kDotsThreads < count) pending |= 1u << i;
    unsigned long long w[kPerThread];
    while (pending != 0) {
#pragma unroll
        for (int i = 0; i < kPerThread; ++i)
            if (pending >> i & 1u)
                asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];"
                             : "=l"(w[i])
                             : "l"(words + threadIdx.x + i * kDotsThreads)
                             : "memory");
#pragma unroll
        for (int i = 0; i < kPerThread; ++i)
            if ((pending >> i & 1u) && static_cast<unsigned>(w[i] >> 32) == tag) {
                all[threadIdx.x + i * kDotsThreads] = __uint_as_float(static_cast<unsigned>(w[i]));
                pending &= ~(1u << i);
            }
    }
}

// Where a site's blocks put their partial sums: tagged words (Tagged kernels) or plain floats
// behind a barrier over the token's blocks (arrival counters, then generations, per token).
struct SiteExchange {
    unsigned long long* tagged;  // [kMaxHcSplitTokens, kMaxSiteSplits, kSiteParts]
    unsigned tag;
    float* parts;  // [n, splits, kSiteParts]
    int* counters;
};

template <bool Tagged>
__global__ void __launch_bounds__(kDotsThreads) hc_site_kernel(HcPreArgs a, float* streams, const float* y, const float* fn,
                                                               SiteExchange ex) {
    constexpr int hc = 4, W = 24;
    int64_t n = blockIdx.y, d = a.d, e = blockIdx.x * int64_t{kDotsThreads} + threadIdx.x;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    // fn is a weight: its loads start before the wait for the preceding kernel.
    pdl_launch_dependents();
    float f[W][hc];
    for (int w = 0; w < W; ++w)
        for (int k = 0; k < hc; ++k) f[w][k] = e < d ? fn[w * hc * d + k * d + e] : 0.0f;
    pdl_wait();
    unsigned* generation = reinterpret_cast<unsigned*>(ex.counters + MhcFamily::kMaxHcSplitTokens + n);
    unsigned seen = !Tagged && threadIdx.x == 0 ? *reinterpret_cast<volatile unsigned*>(generation) : 0;
    float xs[hc] = {}, dots[W] = {}, gram[kGram] = {};
    if (e < d) {
        float* x = streams + n * hc * d;
        for (int j = 0; j < hc; ++j) xs[j] = x[j * d + e];
        if (y != nullptr) {
            float now[hc];
            update_column(x, d, e, y[n * d + e], a.post + n * hc, a.comb + n * hc * hc, xs, now);
            for (int k = 0; k < hc; ++k) xs[k] = now[k];
        }
        for (int w = 0; w < W; ++w)
            for (int k = 0; k < hc; ++k) dots[w] += f[w][k] * xs[k];
        for (int j = 0, g = 0; j < hc; ++j)
            for (int k = j; k < hc; ++k) gram[g++] = xs[j] * xs[k];
    }
    __shared__ float red[kDotsThreads / 32][kSiteParts];
    float td = warp_sums_by_lane<W>(dots, lane), tg = warp_sums_by_lane<kGram>(gram, lane);
    if (lane < W) red[warp][lane] = td;
    if (lane < kGram) red[warp][W + lane] = tg;
    __syncthreads();
    int64_t mine = (n * gridDim.x + blockIdx.x) * kSiteParts, row = n * gridDim.x * kSiteParts;
    if (threadIdx.x < kSiteParts) {
        float v = 0;
        for (int i = 0; i < kDotsThreads / 32; ++i) v += red[i][threadIdx.x];
        if (Tagged) store_tagged(ex.tagged + mine + threadIdx.x, v, ex.tag);
        else ex.parts[mine + threadIdx.x] = v;
    }
    // Every split's sums, then added in split order. (Block 0 writes the new post / comb below:
    // every block has read the old ones before its sums went out.)
    __shared__ float all[kMaxSiteSplits * kSiteParts];
    if (Tagged) {
        gather_tagged(ex.tagged + row, gridDim.x * kSiteParts, ex.tag, all);
    } else {
        row_barrier(ex.counters + n, generation, seen);
        for (unsigned i = threadIdx.x; i < gridDim.x * kSiteParts; i += blockDim.x) all[i] = __ldcg(ex.parts + row + i);
    }
    __syncthreads();
    __shared__ float total[kSiteParts];
    if (threadIdx.x < kSiteParts) {
        float v = 0;
        for (unsigned sp = 0; sp < gridDim.x; ++sp) v += all[sp * kSiteParts + threadIdx.x];
        total[threadIdx.x] = v;
    }
    __syncthreads();
    float flat_ss = total[W + 0] + total[W + 4] + total[W + 7] + total[W + 9];  // the Gram diagonal
    float inv_flat = rsqrtf(flat_ss / (hc * d) + a.norm_eps);
    __shared__ float m[W];
    if (threadIdx.x < W) m[threadIdx.x] = total[threadIdx.x] * inv_flat;
    __syncthreads();
    float pre[hc];
    for (int j = 0; j < hc; ++j) pre[j] = sigmoidf(m[j] * a.scale[0] + a.base[j]) + a.hc_eps;
    if (blockIdx.x == 0 && threadIdx.x < 32) {
        sinkhorn_warp(m, a.base, a.scale, hc, a.iters, a.hc_eps, a.post + n * hc, a.comb + n * hc * hc);
        if (a.pre_out != nullptr && threadIdx.x < hc) a.pre_out[n * hc + threadIdx.x] = pre[threadIdx.x];
    }
    if (a.collapsed == nullptr || e >= d) return;
    float c = 0;
    for (int j = 0; j < hc; ++j) c += pre[j] * xs[j];
    if (a.norm_w == nullptr) {
        a.collapsed[n * d + e] = c;
        return;
    }
    float ss = 0;  // preᵀ G pre
    for (int j = 0, g = 0; j < hc; ++j)
        for (int k = j; k < hc; ++k, ++g) ss += (j == k ? 1.0f : 2.0f) * pre[j] * pre[k] * total[W + g];
    a.collapsed[n * d + e] = a.norm_w[e] * (c * rsqrtf(ss / d + a.norm_w_eps));
}

}  // namespace

// hc_site_kernel when the step's grid fits on the GPU at once (its barrier needs every block of
// a token resident); returns false when it does not.
bool MhcFamily::launch_site(const HcPreArgs& a, int64_t n, float* streams, const float* y, const float* fn) {
    if (!dev_.knobs().hc_site) return false;
    int splits = blocks_for(a.d, kDotsThreads);
    // The two exchanges' kernels hold the same resources.
    int64_t resident = dev_.resident_blocks(reinterpret_cast<const void*>(hc_site_kernel<true>), kDotsThreads);
    if (n > kMaxHcSplitTokens || splits > kMaxSiteSplits || static_cast<int64_t>(splits) * n > resident * dev_.sm_count())
        return false;
    SiteExchange ex{nullptr, 0, nullptr, arrivals_.data<int>()};
    Tensor parts;
    if (dev_.knobs().hc_site_tagged) {
        if (!site_words_.defined() || ++site_tag_ == 0) {  // first use, or the tag wrapped
            site_words_ = dev_.zeros(DType::kI64, {kMaxHcSplitTokens, kMaxSiteSplits, kSiteParts});
            site_tag_ = 1;
        }
        ex.tagged = static_cast<unsigned long long*>(site_words_.raw());
        ex.tag = site_tag_;
    } else {
        parts = dev_.empty(DType::kF32, {n, splits, kSiteParts});
        ex.parts = parts.data<float>();
    }
    auto kernel = dev_.knobs().hc_site_tagged ? hc_site_kernel<true> : hc_site_kernel<false>;
    launch_pdl(kernel, dim3(splits, n), kDotsThreads, 0, dev_.stream(), a, streams, y, fn, ex);
    return true;
}

}  // namespace deepinfer::kernels::cuda
