// mHC on the GPU: the mixing weights come from an RMS-normalised flat view of the streams times
// fn (cuBLAS, fp32), then one block per token applies sigmoid / softmax + Sinkhorn and mixes.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {

// One mHC site's coefficients and collapse as the kernels take them (declared in the backend's
// header: launch_hc_site takes it).
struct HcPreArgs {
    const float* streams;  // [n, hc, d]
    float norm_eps;        // of the flat RMS that scales the mixes
    const float *base, *scale;
    int hc;
    int64_t d;
    int iters;
    float hc_eps;
    float* collapsed;  // [n, d] or null (V4.1's delayed mHC: pre_out instead)
    float* pre_out;    // [n, hc] or null
    float *post, *comb;
    const float* norm_w;  // RMSNorm weight folded into the collapse, or null
    float norm_w_eps;
};

namespace {

constexpr int kMaxHc = 8;

// out[e] = Σ_j w[j] * x[j, e] over the hc streams of one token, the block's threads striding e.
// A chunk's loads (every stream's) all go out before its stores, which the compiler must
// otherwise keep in order (out may alias x as far as it knows): a lone decode token waits one
// memory latency per chunk, not per stride.
__device__ void weighted_stream_sum(const float* x, const float* w, int hc, int64_t d, float* out) {
    constexpr int U = 8;  // strides per chunk
    for (int64_t base = threadIdx.x; base < d; base += U * blockDim.x) {
        float v[kMaxHc][U];
#pragma unroll
        for (int j = 0; j < kMaxHc; ++j)
#pragma unroll
            for (int i = 0; i < U; ++i) {
                int64_t e = base + i * blockDim.x;
                v[j][i] = j < hc && e < d ? x[j * d + e] : 0.0f;
            }
#pragma unroll
        for (int i = 0; i < U; ++i) {
            float acc = 0;
#pragma unroll
            for (int j = 0; j < kMaxHc; ++j)
                if (j < hc) acc += w[j] * v[j][i];
            if (base + i * blockDim.x < d) out[base + i * blockDim.x] = acc;
        }
    }
}

__global__ void rms_flat_kernel(const float* x, int64_t width, float eps, float* y) {
    pdl_prologue();
    const float* in = x + blockIdx.x * width;
    float ss = 0;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) ss += in[c] * in[c];
    ss = block_sum(ss);
    float inv = rsqrtf(ss / width + eps);
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) y[blockIdx.x * width + c] = in[c] * inv;
}

// Decode-sized steps: the mixes' product with fn and the flat RMS in one pass, split over k.
// Block (split, token) covers kSplitCols columns of the flat streams and writes W dot products
// with fn's rows and the sum of squares; hc_pre_token adds the splits in order and scales by
// the RMS (x·fn / rms equals (x / rms)·fn, so no normalised copy is needed).
constexpr int kDotsThreads = 128;
constexpr int kSplitCols = kDotsThreads * 4;  // a float4 per thread: 16 splits for hc 4 x 2048

// Warp sums of V <= 32 values per lane in 31 shuffles instead of 5 per value: at each butterfly
// level a lane keeps half of its remaining values and adds the partner's copy of that half, so
// lane j ends with the sum of value j over the warp (lanes >= V get padding).
template <int Half>
__device__ __forceinline__ void butterfly_level(float (&v)[32], int lane) {
    bool upper = lane & Half;
#pragma unroll
    for (int i = 0; i < Half; ++i) {
        float keep = upper ? v[i + Half] : v[i], send = upper ? v[i] : v[i + Half];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, Half);
    }
    if constexpr (Half > 1) butterfly_level<Half / 2>(v, lane);
}

template <int V>
__device__ __forceinline__ float warp_sums_by_lane(const float (&in)[V], int lane) {
    static_assert(V <= 32);
    float v[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = i < V ? in[i] : 0.0f;
    butterfly_level<16>(v, lane);
    return v[0];
}

// Block sums of the W + 1 per-thread values into parts[0..W] (the block's split of a token).
template <int W>
__device__ __forceinline__ void write_split_sums(const float (&acc)[W + 1], float* parts) {
    __shared__ float red[kDotsThreads / 32][W + 1];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float total = warp_sums_by_lane<W + 1>(acc, lane);  // lane j: the warp's sum of value j
    if (lane <= W) red[warp][lane] = total;
    __syncthreads();
    if (threadIdx.x <= W) {
        float v = 0;
        for (int w = 0; w < kDotsThreads / 32; ++w) v += red[w][threadIdx.x];
        parts[threadIdx.x] = v;
    }
}

template <int W>
__device__ __forceinline__ void hc_dots(const float* streams, const float* fn, int64_t width, float* parts) {
    int split = blockIdx.x, splits = gridDim.x;
    int64_t token = blockIdx.y, col = split * int64_t{kSplitCols} + threadIdx.x * 4;
    float acc[W + 1] = {};
    if (col < width) {
        float4 x = *reinterpret_cast<const float4*>(streams + token * width + col);
        acc[W] = x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
        for (int j = 0; j < W; ++j) {
            float4 f = *reinterpret_cast<const float4*>(fn + j * width + col);
            acc[j] = x.x * f.x + x.y * f.y + x.z * f.z + x.w * f.w;
        }
    }
    write_split_sums<W>(acc, parts + (token * splits + split) * (W + 1));
}

// Whether this block is the last of the grid's row (blockIdx.y) to get here (see last_to_arrive).
__device__ bool last_split_to_arrive(int* arrivals) { return last_to_arrive(arrivals + blockIdx.y, gridDim.x); }

// Sinkhorn of hc = 4 with the whole matrix in each lane's registers: no shuffles on the serial
// chain of iterations, the four rows (columns) normalised side by side. Sums add as the general
// path's butterflies do, (a + b) + (c + d), so the result is the same to the bit.
__device__ void sinkhorn4_registers(const float* m, const float* base, const float* scale, int iters, float hc_eps,
                                    float* comb) {
    constexpr int hc = 4;
    float c[hc][hc];
#pragma unroll
    for (int j = 0; j < hc; ++j) {
        float l[hc], mx = -INFINITY;
#pragma unroll
        for (int k = 0; k < hc; ++k) {
            l[k] = m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
            mx = fmaxf(mx, l[k]);
        }
#pragma unroll
        for (int k = 0; k < hc; ++k) c[j][k] = expf(l[k] - mx);
        float sum = (c[j][0] + c[j][1]) + (c[j][2] + c[j][3]);
#pragma unroll
        for (int k = 0; k < hc; ++k) c[j][k] = __fdividef(c[j][k], sum) + hc_eps;
    }
    for (int it = 0; it < iters; ++it) {
        if (it > 0)
#pragma unroll
            for (int j = 0; j < hc; ++j) {
                float sum = (c[j][0] + c[j][1]) + (c[j][2] + c[j][3]) + hc_eps;
#pragma unroll
                for (int k = 0; k < hc; ++k) c[j][k] = __fdividef(c[j][k], sum);
            }
#pragma unroll
        for (int k = 0; k < hc; ++k) {
            float sum = (c[0][k] + c[1][k]) + (c[2][k] + c[3][k]) + hc_eps;
#pragma unroll
            for (int j = 0; j < hc; ++j) c[j][k] = __fdividef(c[j][k], sum);
        }
    }
    int lane = threadIdx.x % 32;
    if (lane >= hc * hc) return;
    float mine = 0;
#pragma unroll
    for (int e = 0; e < hc * hc; ++e)
        if (e == lane) mine = c[e / hc][e % hc];
    comb[lane] = mine;
}

// post and comb of one token from its mixes `m`, on one warp (hc = 4: sinkhorn4_registers; other
// sizes: lane (j, k) = (lane / hc, lane % hc) owns comb[j][k]); row softmax, then Sinkhorn
// normalisation (columns, then rows and columns alternating). Divisions are fast reciprocals
// (2 ulp): the loop is latency-bound.
__device__ void sinkhorn_warp(const float* m, const float* base, const float* scale, int hc, int iters, float hc_eps,
                              float* post, float* comb) {
    int lane = threadIdx.x;
    if (lane < hc) post[lane] = 2.0f * sigmoidf(m[hc + lane] * scale[1] + base[hc + lane]);
    if (hc == 4) {
        sinkhorn4_registers(m, base, scale, iters, hc_eps, comb);
        return;
    }
    bool owner = lane < hc * hc;  // the other lanes follow element 0 and write nothing
    int e = owner ? lane : 0, j = e / hc, k = e % hc;
    auto logit = [&](int jj, int kk) { return m[2 * hc + jj * hc + kk] * scale[2] + base[2 * hc + jj * hc + kk]; };
    // Sums over the row's / column's lanes in index order, as a serial loop adds them.
    auto row_sum = [&](float v) {
        float s = 0;
        for (int kk = 0; kk < hc; ++kk) s += __shfl_sync(0xffffffffu, v, j * hc + kk);
        return s;
    };
    auto column_sum = [&](float v) {
        float s = 0;
        for (int jj = 0; jj < hc; ++jj) s += __shfl_sync(0xffffffffu, v, jj * hc + k);
        return s;
    };
    float mx = -INFINITY;
    for (int kk = 0; kk < hc; ++kk) mx = fmaxf(mx, logit(j, kk));
    float c = expf(logit(j, k) - mx);
    c = __fdividef(c, row_sum(c)) + hc_eps;
    for (int it = 0; it < iters; ++it) {
        if (it > 0) c = __fdividef(c, row_sum(c) + hc_eps);
        c = __fdividef(c, column_sum(c) + hc_eps);
    }
    if (owner) comb[e] = c;
}

// Token n's pre / post / comb from its mixes, then the collapsed input (or, for the delayed mHC
// of V4.1, pre itself), on the calling block. `mixes` holds [n, width] finished mixes (splits ==
// 0) or hc_dots' [n, splits, width + 1]; they are read through L2 (__ldcg): other blocks of the
// same kernel may have written them.
__device__ void hc_pre_token(const HcPreArgs& a, int64_t n, const float* mixes, int splits) {
    int hc = a.hc;
    int64_t d = a.d;
    int width = (2 + hc) * hc;
    __shared__ float m[(2 + kMaxHc) * kMaxHc];
    if (splits == 0) {
        for (int j = threadIdx.x; j < width; j += blockDim.x) m[j] = __ldcg(mixes + n * width + j);
    } else {
        const float* part = mixes + n * splits * (width + 1);
        float ss = 0;
#pragma unroll 8
        for (int s = 0; s < splits; ++s) ss += __ldcg(part + s * (width + 1) + width);
        float inv = rsqrtf(ss / (hc * d) + a.norm_eps);
        for (int j = threadIdx.x; j < width; j += blockDim.x) {
            float v = 0;
#pragma unroll 8
            for (int s = 0; s < splits; ++s) v += __ldcg(part + s * (width + 1) + j);
            m[j] = v * inv;
        }
    }
    __syncthreads();
    // Warp 0 runs the Sinkhorn (serial over its iterations) while the other warps collapse the
    // streams with `pre`, which does not depend on it; the norm's reduction then joins them.
    float pre[kMaxHc];
    for (int j = 0; j < hc; ++j) pre[j] = sigmoidf(m[j] * a.scale[0] + a.base[j]) + a.hc_eps;
    if (threadIdx.x < 32) {
        sinkhorn_warp(m, a.base, a.scale, hc, a.iters, a.hc_eps, a.post + n * hc, a.comb + n * hc * hc);
        if (a.pre_out != nullptr && threadIdx.x < hc) a.pre_out[n * hc + threadIdx.x] = pre[threadIdx.x];
    }
    if (a.collapsed == nullptr) return;  // uniform over the block
    const float* x = a.streams + n * hc * d;
    float* out = a.collapsed + n * d;
    // Four columns per thread and load where rows allow (16-byte aligned): a quarter of the
    // dependent load rounds on the few worker warps.
    bool by4 = d % 4 == 0 && (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out) |
                              reinterpret_cast<uintptr_t>(a.norm_w)) % 16 == 0;
    int workers = blockDim.x - 32, me = threadIdx.x - 32, step = by4 ? 4 : 1;
    float ss = 0;
    if (me >= 0)
#pragma unroll 2
        for (int64_t e = me * step; e < d; e += workers * step) {
            if (by4) {
                float4 acc = {0, 0, 0, 0};
                for (int j = 0; j < hc; ++j) {  // may be this kernel's writes: read through L2
                    float4 v = __ldcg(reinterpret_cast<const float4*>(x + j * d + e));
                    acc.x += pre[j] * v.x, acc.y += pre[j] * v.y, acc.z += pre[j] * v.z, acc.w += pre[j] * v.w;
                }
                *reinterpret_cast<float4*>(out + e) = acc;
                ss += acc.x * acc.x + acc.y * acc.y + acc.z * acc.z + acc.w * acc.w;
            } else {
                float acc = 0;
                for (int j = 0; j < hc; ++j) acc += pre[j] * __ldcg(x + j * d + e);
                out[e] = acc;
                ss += acc * acc;
            }
        }
    if (a.norm_w == nullptr) return;
    __shared__ float warp_ss[32];
    ss = warp_sum(ss);
    if (threadIdx.x % 32 == 0) warp_ss[threadIdx.x / 32] = ss;
    __syncthreads();
    float total = 0;
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) total += warp_ss[w];
    float inv = rsqrtf(total / d + a.norm_w_eps);
    if (me >= 0)  // each thread rescales the elements it wrote
        for (int64_t e = me * step; e < d; e += workers * step)
            for (int i = 0; i < step; ++i) out[e + i] = a.norm_w[e + i] * (out[e + i] * inv);
}

__global__ void hc_pre_kernel(HcPreArgs a, const float* mixes, int splits) {
    pdl_prologue();
    hc_pre_token(a, blockIdx.x, mixes, splits);
}

// hc_dots and hc_pre_token in one launch (decode: one kernel per mHC site): the last of a
// token's split blocks to finish finishes the token.
template <int W>
__global__ void __launch_bounds__(kDotsThreads) hc_dots_pre_kernel(HcPreArgs a, const float* fn, float* parts,
                                                                   int* arrivals) {
    pdl_prologue();
    hc_dots<W>(a.streams, fn, a.hc * a.d, parts);
    if (last_split_to_arrive(arrivals)) hc_pre_token(a, blockIdx.y, parts, gridDim.x);
}

// The previous site's update of column e of one token's four streams x (as hc_post_kernel):
// now[k] = post[k] * y_e + Σ_j comb[j][k] * old[j], written back to x.
__device__ __forceinline__ void update_column(float* x, int64_t d, int64_t e, float y_e, const float* post,
                                              const float* comb, const float (&old)[4], float (&now)[4]) {
    for (int k = 0; k < 4; ++k) {
        float v = post[k] * y_e;
        for (int j = 0; j < 4; ++j) v += comb[j * 4 + k] * old[j];
        x[k * d + e] = now[k] = v;
    }
}

// A site's stream update (hc_post) and the next site's hc_pre_norm in one launch, hc = 4: block
// (split, token) updates columns e of all four streams (a thread per column, post/comb the old
// site's) and adds their products with the next site's fn (a column's four flat positions); the
// last split block of the token then runs hc_pre_token, which overwrites post/comb.
template <int W>
__global__ void __launch_bounds__(kDotsThreads) hc_post_dots_pre_kernel(HcPreArgs a, float* streams, const float* y,
                                                                        const float* fn, float* parts, int* arrivals) {
    pdl_prologue();
    constexpr int hc = 4;
    int64_t n = blockIdx.y, d = a.d, e = blockIdx.x * int64_t{kDotsThreads} + threadIdx.x;
    float acc[W + 1] = {};
    if (e < d) {
        float* x = streams + n * hc * d;
        float old[hc], now[hc];
        for (int j = 0; j < hc; ++j) old[j] = x[j * d + e];
        update_column(x, d, e, y[n * d + e], a.post + n * hc, a.comb + n * hc * hc, old, now);
        for (int k = 0; k < hc; ++k) acc[W] += now[k] * now[k];
        for (int w = 0; w < W; ++w)
            for (int k = 0; k < hc; ++k) acc[w] += fn[w * hc * d + k * d + e] * now[k];
    }
    write_split_sums<W>(acc, parts + (n * gridDim.x + blockIdx.x) * (W + 1));
    if (last_split_to_arrive(arrivals)) hc_pre_token(a, n, parts, gridDim.x);
}

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
    unsigned* generation = reinterpret_cast<unsigned*>(ex.counters + CudaBackend::kMaxHcSplitTokens + n);
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

__global__ void hc_post_kernel(float* streams, const float* y, const float* post, const float* comb, int hc, int64_t d) {
    pdl_prologue();
    int64_t n = blockIdx.x;
    float* x = streams + n * hc * d;
    for (int64_t e = blockIdx.y * blockDim.x + threadIdx.x; e < d; e += gridDim.y * blockDim.x) {
        float old[kMaxHc];
        for (int j = 0; j < hc; ++j) old[j] = x[j * d + e];
        for (int k = 0; k < hc; ++k) {
            float acc = post[n * hc + k] * y[n * d + e];
            for (int j = 0; j < hc; ++j) acc += comb[(n * hc + j) * hc + k] * old[j];
            x[k * d + e] = acc;
        }
    }
}

__global__ void hc_head_kernel(const float* streams, const float* mixes, const float* base, const float* scale, int hc,
                               int64_t d, float hc_eps, float* out) {
    pdl_prologue();
    int64_t n = blockIdx.x;
    __shared__ float pre[kMaxHc];
    if (threadIdx.x < hc) pre[threadIdx.x] = sigmoidf(mixes[n * hc + threadIdx.x] * scale[0] + base[threadIdx.x]) + hc_eps;
    __syncthreads();
    weighted_stream_sum(streams + n * hc * d, pre, hc, d, out + n * d);
}

// Decode-sized hc_head in one launch (hc = W = 4): the split mix products, then the last split
// block of the token scales them by the flat RMS and collapses the streams.
template <int W>
__global__ void __launch_bounds__(kDotsThreads) hc_head_dots_kernel(const float* streams, const float* fn, int64_t d,
                                                                    float norm_eps, const float* base, const float* scale,
                                                                    float hc_eps, float* parts, int* arrivals, float* out) {
    pdl_prologue();
    hc_dots<W>(streams, fn, W * d, parts);
    if (!last_split_to_arrive(arrivals)) return;
    int64_t n = blockIdx.y;
    const float* part = parts + n * gridDim.x * (W + 1);
    __shared__ float pre[W];
    if (threadIdx.x < W) {
        float ss = 0, dot = 0;
        for (unsigned s = 0; s < gridDim.x; ++s) {
            ss += __ldcg(part + s * (W + 1) + W);
            dot += __ldcg(part + s * (W + 1) + threadIdx.x);
        }
        float m = dot * rsqrtf(ss / (W * d) + norm_eps);
        pre[threadIdx.x] = sigmoidf(m * scale[0] + base[threadIdx.x]) + hc_eps;
    }
    __syncthreads();
    weighted_stream_sum(streams + n * W * d, pre, W, d, out + n * d);
}

}  // namespace

void CudaBackend::hc_pre(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                         Tensor& collapsed, Tensor& post, Tensor& comb) {
    DI_CUDA_OP("hc_pre");
    mix_coefficients(streams, fn, base, scale, p, collapsed.data<float>(), nullptr, post, comb);
}

void CudaBackend::hc_pre_norm(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                              const MhcParams& p, const Tensor& norm_weight, float eps, Tensor& collapsed, Tensor& post,
                              Tensor& comb) {
    DI_CUDA_OP("hc_pre_norm");
    mix_coefficients(streams, fn, base, scale, p, collapsed.data<float>(), nullptr, post, comb,
                     {norm_weight.data<float>(), eps});
}

void CudaBackend::hc_mix(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                         Tensor& pre, Tensor& post, Tensor& comb) {
    DI_CUDA_OP("hc_mix");
    mix_coefficients(streams, fn, base, scale, p, nullptr, pre.data<float>(), post, comb);
}

// hc_site_kernel when the step's grid fits on the GPU at once (its barrier needs every block of
// a token resident); returns false when it does not.
bool CudaBackend::launch_hc_site(const HcPreArgs& a, int64_t n, float* streams, const float* y, const float* fn) {
    if (!variants_.hc_site) return false;
    int splits = blocks_for(a.d, kDotsThreads);
    if (hc_site_resident_ == 0)  // the two exchanges' kernels hold the same resources
        DI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&hc_site_resident_, hc_site_kernel<true>, kDotsThreads, 0));
    if (n > kMaxHcSplitTokens || splits > kMaxSiteSplits ||
        static_cast<int64_t>(splits) * n > static_cast<int64_t>(hc_site_resident_) * sm_count_)
        return false;
    SiteExchange ex{nullptr, 0, nullptr, hc_arrivals_.data<int>()};
    Tensor parts;
    if (variants_.hc_site_tagged) {
        if (!hc_site_words_.defined() || ++hc_site_tag_ == 0) {  // first use, or the tag wrapped
            hc_site_words_ = zeros(DType::kI64, {kMaxHcSplitTokens, kMaxSiteSplits, kSiteParts});
            hc_site_tag_ = 1;
        }
        ex.tagged = static_cast<unsigned long long*>(hc_site_words_.raw());
        ex.tag = hc_site_tag_;
    } else {
        parts = empty(DType::kF32, {n, splits, kSiteParts});
        ex.parts = parts.data<float>();
    }
    auto kernel = variants_.hc_site_tagged ? hc_site_kernel<true> : hc_site_kernel<false>;
    launch_pdl(kernel, dim3(splits, n), kDotsThreads, 0, stream(), a, streams, y, fn, ex);
    return true;
}

void CudaBackend::mix_coefficients(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                                   const MhcParams& p, float* collapsed, float* pre, Tensor& post, Tensor& comb,
                                   CollapseNorm norm) {
    int64_t n = streams.dim(0), d = streams.dim(2), width = (2 + p.hc) * p.hc;
    DI_CUDA_REQUIRE(p.hc * p.hc <= 32, "cuda mHC: hc_mult " + std::to_string(p.hc) + " is above 5 (one warp per Sinkhorn)");
    if (n == 0) return;
    HcPreArgs a{streams.data<float>(), p.norm_eps, base.data<float>(), scale.data<float>(), p.hc, d, p.sinkhorn_iters,
                p.hc_eps, collapsed, pre, post.data<float>(), comb.data<float>(), norm.weight, norm.eps};
    bool four = p.hc == 4 && streams.dim(1) == 4 && fn.dtype() == DType::kF32 && !invariant_;
    if (four && launch_hc_site(a, n, streams.data<float>(), nullptr, fn.data<float>())) return;
    if (four && n <= kMaxHcSplitTokens && (p.hc * d) % 4 == 0) {
        int splits = static_cast<int>((p.hc * d + kSplitCols - 1) / kSplitCols);
        Tensor parts = empty(DType::kF32, {n, splits, width + 1});
        launch_pdl(hc_dots_pre_kernel<24>, dim3(splits, n), kDotsThreads, 0, stream(), a, fn.data<float>(),
                   parts.data<float>(), hc_arrivals_.data<int>());
        return;
    }
    // Beyond kMaxHcSplitTokens tokens one GEMM reads fn once for all of them.
    Tensor flat = empty(DType::kF32, {n, p.hc * d}), mixes = empty(DType::kF32, {n, width});
    launch_pdl(rms_flat_kernel, n, 256, 0, stream(), streams.data<float>(), p.hc * d, p.norm_eps, flat.data<float>());
    gemm(flat.data<float>(), p.hc * d, fn, mixes.data<float>(), width, n);
    launch_pdl(hc_pre_kernel, n, 512, 0, stream(), a, mixes.data<float>(), 0);
}

void CudaBackend::hc_post_pre_norm(Tensor& streams, const Tensor& y, Tensor& post, Tensor& comb, const Tensor& fn,
                                   const Tensor& base, const Tensor& scale, const MhcParams& p, const Tensor& norm_weight,
                                   float eps, Tensor& collapsed) {
    DI_CUDA_OP("hc_post_pre_norm");
    int64_t n = streams.dim(0), d = streams.dim(2), width = (2 + p.hc) * p.hc;
    if (p.hc != 4 || streams.dim(1) != 4 || fn.dtype() != DType::kF32 || n > kMaxHcSplitTokens || invariant_) {
        hc_post(streams, y, post, comb);
        hc_pre_norm(streams, fn, base, scale, p, norm_weight, eps, collapsed, post, comb);
        return;
    }
    if (n == 0) return;
    HcPreArgs a{streams.data<float>(), p.norm_eps, base.data<float>(), scale.data<float>(), p.hc, d, p.sinkhorn_iters,
                p.hc_eps, collapsed.data<float>(), nullptr, post.data<float>(), comb.data<float>(),
                norm_weight.data<float>(), eps};
    if (launch_hc_site(a, n, streams.data<float>(), y.data<float>(), fn.data<float>())) return;
    int splits = blocks_for(d, kDotsThreads);
    Tensor parts = empty(DType::kF32, {n, splits, width + 1});
    launch_pdl(hc_post_dots_pre_kernel<24>, dim3(splits, n), kDotsThreads, 0, stream(), a, streams.data<float>(),
               y.data<float>(), fn.data<float>(), parts.data<float>(), hc_arrivals_.data<int>());
}

void CudaBackend::hc_post(Tensor& streams, const Tensor& y, const Tensor& post, const Tensor& comb) {
    DI_CUDA_OP("hc_post");
    int64_t n = streams.dim(0), hc = streams.dim(1), d = streams.dim(2);
    if (n == 0) return;
    launch_pdl(hc_post_kernel, dim3(n, blocks_for(d, 256)), 256, 0, stream(), streams.data<float>(), y.data<float>(),
               post.data<float>(), comb.data<float>(), static_cast<int>(hc), d);
}

void CudaBackend::hc_head(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                          Tensor& out) {
    DI_CUDA_OP("hc_head");
    int64_t n = streams.dim(0), d = streams.dim(2);
    if (n == 0) return;
    if (p.hc == 4 && fn.dtype() == DType::kF32 && n <= kMaxHcSplitTokens && (p.hc * d) % 4 == 0 && !invariant_) {
        int splits = static_cast<int>((p.hc * d + kSplitCols - 1) / kSplitCols);
        Tensor parts = empty(DType::kF32, {n, splits, p.hc + 1});
        launch_pdl(hc_head_dots_kernel<4>, dim3(splits, n), kDotsThreads, 0, stream(), streams.data<float>(),
                   fn.data<float>(), d, p.norm_eps, base.data<float>(), scale.data<float>(), p.hc_eps,
                   parts.data<float>(), hc_arrivals_.data<int>(), out.data<float>());
        return;
    }
    Tensor flat = empty(DType::kF32, {n, p.hc * d}), mixes = empty(DType::kF32, {n, static_cast<int64_t>(p.hc)});
    launch_pdl(rms_flat_kernel, n, 256, 0, stream(), streams.data<float>(), p.hc * d, p.norm_eps, flat.data<float>());
    gemm(flat.data<float>(), p.hc * d, fn, mixes.data<float>(), p.hc, n);
    launch_pdl(hc_head_kernel, n, 128, 0, stream(), streams.data<float>(), mixes.data<float>(), base.data<float>(),
               scale.data<float>(), p.hc, d, p.hc_eps, out.data<float>());
}

}  // namespace deepinfer::kernels::cuda
