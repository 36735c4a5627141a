#pragma once
// What the mHC kernels share (mhc.cu, mhc_site.cu): the site arguments, the split dot products,
// the Sinkhorn on one warp and the per-token finish. Internal to those files: an unnamed
// namespace, so each gets its own copies of the device functions.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {

// One mHC site's coefficients and collapse as the kernels take them (declared in mhc_family.cuh:
// launch_site takes it).
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

}  // namespace

}  // namespace deepinfer::kernels::cuda
