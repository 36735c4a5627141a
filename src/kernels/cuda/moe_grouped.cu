// Routed experts grouped by expert on the device, for batches past the per-pair path: the
// (token, slot) pairs are ordered by expert in one block (counts, offsets, then each expert's
// pairs in pair order: no atomics, so the layout does not vary from run to run); each block then
// owns a few rows of one expert's matrices and applies them to that expert's pairs, eight at a
// time, so the weights are read once per eight pairs and nothing returns to the host. Every pair
// gets its own output row, and the slots of a token are added in slot order at the end. By default
// (variant moe_grouped_mma) the products run on tensor cores instead (see moe_up_mma_kernel).
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kPairsPerPass = 8;
constexpr int kThreads = 256;
constexpr int kUpRows = 2;    // rows of w1 and of w3 per block
constexpr int kDownRows = 4;  // rows of w2 per block

__global__ void group_pairs_kernel(const int* ids, int pairs, int experts, int* order, int* offsets) {
    pdl_prologue();
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
        int count = 0;
        for (int p = 0; p < pairs; ++p) count += ids[p] == e;
        offsets[e + 1] = count;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        offsets[0] = 0;
        for (int e = 0; e < experts; ++e) offsets[e + 1] += offsets[e];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
        int at = offsets[e];
        for (int p = 0; p < pairs; ++p)
            if (ids[p] == e) order[at++] = p;
    }
}

// acc[r * M + t] += w[r] · x[t] over k, the block's threads splitting k.
template <int R, int M>
__device__ void rows_times_pairs(const __nv_bfloat16* const (&w)[R], const float* const (&x)[M], int k, float (&acc)[R * M]) {
    for (int c = threadIdx.x * 8; c < k; c += kThreads * 8) {
        uint4 wv[R];
        for (int r = 0; r < R; ++r) wv[r] = __ldg(reinterpret_cast<const uint4*>(w[r] + c));
        for (int t = 0; t < M; ++t) {
            float4 lo = *reinterpret_cast<const float4*>(x[t] + c), hi = *reinterpret_cast<const float4*>(x[t] + c + 4);
            for (int r = 0; r < R; ++r) acc[r * M + t] += dot8(wv[r], lo, hi);
        }
    }
}

// out[i] = Σ over the block's threads of v[i], warps added in order; ends synchronised.
template <int N>
__device__ void block_sums(const float (&v)[N], float* out) {
    __shared__ float part[kThreads / 32][N];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int i = 0; i < N; ++i) {
        float s = warp_sum(v[i]);
        if (lane == 0) part[warp][i] = s;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < N; i += kThreads) {
        float s = 0;
        for (int w = 0; w < kThreads / 32; ++w) s += part[w][i];
        out[i] = s;
    }
    __syncthreads();
}

// h[pair, i] = silu(min(w1_i · x, limit)) * clamp(w3_i · x, ±limit) for the expert's pairs.
__global__ void __launch_bounds__(kThreads) moe_up_grouped_kernel(const float* x, int d, const int* order, const int* offsets,
                                                                  const ExpertRows* ex, int top_k, int inter, float limit,
                                                                  float* h) {
    pdl_prologue();
    constexpr int R = 2 * kUpRows, M = kPairsPerPass;
    int e = blockIdx.x, begin = offsets[e], end = offsets[e + 1], r0 = blockIdx.y * kUpRows;
    if (begin == end) return;
    const __nv_bfloat16* w[R];
    for (int r = 0; r < kUpRows; ++r) {
        long long row = min(r0 + r, inter - 1);
        w[r] = ex[e].w1 + row * d;
        w[kUpRows + r] = ex[e].w3 + row * d;
    }
    __shared__ float sums[R * M];
    for (int p0 = begin; p0 < end; p0 += M) {
        int mt = min(M, end - p0);
        const float* xp[M];
        for (int t = 0; t < M; ++t) xp[t] = x + static_cast<long long>(order[p0 + min(t, mt - 1)] / top_k) * d;
        float acc[R * M] = {};
        rows_times_pairs<R, M>(w, xp, d, acc);
        block_sums<R * M>(acc, sums);
        int r = threadIdx.x / M, t = threadIdx.x % M;
        if (r < kUpRows && t < mt && r0 + r < inter) {
            float g = fminf(sums[r * M + t], limit), u = fminf(fmaxf(sums[(kUpRows + r) * M + t], -limit), limit);
            h[static_cast<long long>(order[p0 + t]) * inter + r0 + r] = g / (1.0f + expf(-g)) * u;
        }
    }
}

// y[pair, r] = weight[pair] * w2_r · h[pair] for the expert's pairs.
__global__ void __launch_bounds__(kThreads) moe_down_grouped_kernel(const float* h, const int* order, const int* offsets,
                                                                    const ExpertRows* ex, const float* weights, int d,
                                                                    int inter, float* y) {
    pdl_prologue();
    constexpr int R = kDownRows, M = kPairsPerPass;
    int e = blockIdx.x, begin = offsets[e], end = offsets[e + 1], r0 = blockIdx.y * R;
    if (begin == end) return;
    const __nv_bfloat16* w[R];
    for (int r = 0; r < R; ++r) w[r] = ex[e].w2 + static_cast<long long>(min(r0 + r, d - 1)) * inter;
    __shared__ float sums[R * M];
    for (int p0 = begin; p0 < end; p0 += M) {
        int mt = min(M, end - p0);
        const float* hp[M];
        for (int t = 0; t < M; ++t) hp[t] = h + static_cast<long long>(order[p0 + min(t, mt - 1)]) * inter;
        float acc[R * M] = {};
        rows_times_pairs<R, M>(w, hp, inter, acc);
        block_sums<R * M>(acc, sums);
        int r = threadIdx.x / M, t = threadIdx.x % M;
        if (r < R && t < mt && r0 + r < d) {
            int pair = order[p0 + t];
            y[static_cast<long long>(pair) * d + r0 + r] = weights[pair] * sums[r * M + t];
        }
    }
}

// out[token] += Σ_slot y[(token, slot)], in slot order.
__global__ void moe_combine_kernel(const float* y, int top_k, int64_t d, float* out) {
    pdl_prologue();
    int64_t token = blockIdx.x;
    for (int64_t c = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < d; c += gridDim.y * blockDim.x) {
        float v = 0;
        for (int s = 0; s < top_k; ++s) v += y[(token * top_k + s) * d + c];
        out[token * d + c] += v;
    }
}

// out[token] += Σ_slot weight[pair] * y[pair], in slot order (pair = token * top_k + slot).
__global__ void moe_weighted_combine_kernel(const float* y, const float* weights, int top_k, int64_t d, float* out) {
    pdl_prologue();
    int64_t token = blockIdx.x;
    for (int64_t c = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < d; c += gridDim.y * blockDim.x) {
        float v = 0;
        for (int s = 0; s < top_k; ++s) v += weights[token * top_k + s] * y[(token * top_k + s) * d + c];
        out[token * d + c] += v;
    }
}

// The same products on tensor cores (mma.m16n8k16, bf16 weights x bf16 parts of the activations,
// fp32 accumulation): a warp owns 16 rows of one expert's matrix and streams them once over k,
// its accumulators holding up to kMmaPairs of the expert's pairs (more pairs: another pass). A
// lane loads 8 consecutive k of a row and of each pair's activations; the two mma k-halves take
// them in the same permuted order on both sides, so the sum over k is unchanged.
constexpr int kMmaTiles = 8;                 // pair tiles of 8 per pass
constexpr int kMmaPairs = 8 * kMmaTiles;
constexpr int kMmaWarpRows = 16;
constexpr int kMmaUpRows = kMmaWarpRows * kThreads / 32 / 2;  // rows of w1 (warps 0-3) and of w3 (warps 4-7) per block
constexpr int kMmaDownRows = kMmaWarpRows * kThreads / 32;    // rows of w2 per block

__device__ __forceinline__ uint4 load8_or_zero(const __nv_bfloat16* row, int k0, int k) {
    return k0 < k ? __ldg(reinterpret_cast<const uint4*>(row + k0)) : make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ uint4 stream8_or_zero(const __nv_bfloat16* row, int k0, int k) {
    return k0 < k ? load_weights(row + k0) : make_uint4(0, 0, 0, 0);
}

// acc[j] (rows w0 and w0 + 8 of the warp's tile x pairs of tile j) += W · Σ_p part p of the pairs'
// activations, over k. act[j] points at pair (8 j + lane / 4)'s part 0 (null: no pair there);
// parts lie part_stride apart. The weights of U k steps of 32 are requested before their products.
template <int P, int U>
__device__ void warp_rows_times_pairs(const __nv_bfloat16* w0, const __nv_bfloat16* w8, const __nv_bfloat16* const (&act)[kMmaTiles],
                                      int tiles, int64_t part_stride, int k, float (&acc)[kMmaTiles][4]) {
    int q = threadIdx.x % 4;
#pragma unroll(U == 1 ? 4 : 1)
    for (int base = 8 * q; base < k + 8 * q; base += 32 * U) {  // every lane runs the same steps
        uint4 a0[U], a8[U];
#pragma unroll
        for (int u = 0; u < U; ++u) a0[u] = stream8_or_zero(w0, base + 32 * u, k), a8[u] = stream8_or_zero(w8, base + 32 * u, k);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            int k0 = base + 32 * u;
#pragma unroll
            for (int j = 0; j < kMmaTiles; ++j) {
                if (j >= tiles) break;
#pragma unroll
                for (int p = 0; p < P; ++p) {
                    uint4 b = act[j] != nullptr ? load8_or_zero(act[j] + p * part_stride, k0, k) : make_uint4(0, 0, 0, 0);
                    mma_bf16(acc[j], a0[u].x, a8[u].x, a0[u].y, a8[u].y, b.x, b.y);
                    mma_bf16(acc[j], a0[u].z, a8[u].z, a0[u].w, a8[u].w, b.z, b.w);
                }
            }
        }
    }
}

// h[pair] = parts of silu(min(w1 · x, limit)) * clamp(w3 · x, ±limit) for the block's 64 rows.
template <int P, int U>
__global__ void __launch_bounds__(kThreads) moe_up_mma_kernel(const __nv_bfloat16* xb, int64_t x_stride, int d, const int* order,
                                                              const int* offsets, const ExpertRows* ex, int top_k, int inter,
                                                              float limit, __nv_bfloat16* hb, int64_t h_stride) {
    pdl_prologue();
    __shared__ float gu[2][kMmaUpRows][kMmaPairs + 1];
    int e = blockIdx.x, begin = offsets[e], end = offsets[e + 1], r0 = blockIdx.y * kMmaUpRows;
    if (begin == end) return;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, which = warp / 4, wr = (warp % 4) * kMmaWarpRows;
    const __nv_bfloat16* w = which == 0 ? ex[e].w1 : ex[e].w3;
    const __nv_bfloat16* w0 = w + static_cast<int64_t>(min(r0 + wr + lane / 4, inter - 1)) * d;
    const __nv_bfloat16* w8 = w + static_cast<int64_t>(min(r0 + wr + lane / 4 + 8, inter - 1)) * d;
    for (int p0 = begin; p0 < end; p0 += kMmaPairs) {
        int count = min(kMmaPairs, end - p0), tiles = (count + 7) / 8;
        const __nv_bfloat16* act[kMmaTiles];
        for (int j = 0; j < kMmaTiles; ++j) {
            int t = 8 * j + lane / 4;
            act[j] = t < count ? xb + static_cast<int64_t>(order[p0 + t] / top_k) * d : nullptr;
        }
        float acc[kMmaTiles][4] = {};
        warp_rows_times_pairs<P, U>(w0, w8, act, tiles, x_stride, d, acc);
        __syncthreads();  // the previous pass has read gu
#pragma unroll
        for (int j = 0; j < kMmaTiles; ++j)  // constant indices keep acc in registers
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (j < tiles) gu[which][wr + lane / 4 + 8 * (i / 2)][8 * j + 2 * (lane % 4) + i % 2] = acc[j][i];
        __syncthreads();
        for (int i = threadIdx.x; i < kMmaUpRows * count; i += kThreads) {
            int r = i % kMmaUpRows, t = i / kMmaUpRows;
            if (r0 + r >= inter) continue;
            float g = fminf(gu[0][r][t], limit), u = fminf(fmaxf(gu[1][r][t], -limit), limit);
            store_parts(g / (1.0f + expf(-g)) * u, P, hb + static_cast<int64_t>(order[p0 + t]) * inter + r0 + r, h_stride);
        }
    }
}

// y[pair, r] = weight[pair] * w2_r · h[pair] for the block's 128 rows.
template <int P, int U>
__global__ void __launch_bounds__(kThreads) moe_down_mma_kernel(const __nv_bfloat16* hb, int64_t h_stride, const int* order,
                                                                const int* offsets, const ExpertRows* ex, const float* weights,
                                                                int d, int inter, float* y) {
    pdl_prologue();
    int e = blockIdx.x, begin = offsets[e], end = offsets[e + 1];
    if (begin == end) return;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, row = blockIdx.y * kMmaDownRows + warp * kMmaWarpRows + lane / 4;
    const __nv_bfloat16* w0 = ex[e].w2 + static_cast<int64_t>(min(row, d - 1)) * inter;
    const __nv_bfloat16* w8 = ex[e].w2 + static_cast<int64_t>(min(row + 8, d - 1)) * inter;
    for (int p0 = begin; p0 < end; p0 += kMmaPairs) {
        int count = min(kMmaPairs, end - p0), tiles = (count + 7) / 8;
        const __nv_bfloat16* act[kMmaTiles];
        for (int j = 0; j < kMmaTiles; ++j) {
            int t = 8 * j + lane / 4;
            act[j] = t < count ? hb + static_cast<int64_t>(order[p0 + t]) * inter : nullptr;
        }
        float acc[kMmaTiles][4] = {};
        warp_rows_times_pairs<P, U>(w0, w8, act, tiles, h_stride, inter, acc);
#pragma unroll
        for (int j = 0; j < kMmaTiles; ++j)  // constant indices keep acc in registers
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                int t = 8 * j + 2 * (lane % 4) + i % 2, r = row + 8 * (i / 2);
                if (j >= tiles || t >= count || r >= d) continue;
                int pair = order[p0 + t];
                y[static_cast<int64_t>(pair) * d + r] = weights[pair] * acc[j][i];
            }
    }
}

template <int P, int U>
void launch_moe_mma(cudaStream_t stream, const __nv_bfloat16* xb, int64_t n, int d, const int* order, const int* offsets,
                    const ExpertRows* rows, int experts, int top_k, int inter, float limit, __nv_bfloat16* hb, int64_t pairs,
                    const float* weights, float* y) {
    launch_pdl(moe_up_mma_kernel<P, U>, dim3(experts, blocks_for(inter, kMmaUpRows)), kThreads, 0, stream, xb, n * d, d, order,
               offsets, rows, top_k, inter, limit, hb, pairs * inter);
    launch_pdl(moe_down_mma_kernel<P, U>, dim3(experts, blocks_for(d, kMmaDownRows)), kThreads, 0, stream, hb, pairs * inter,
               order, offsets, rows, weights, d, inter, y);
}

}  // namespace

void MoeFamily::moe_experts_invariant(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                      std::span<const ExpertWeights> experts, float limit, Tensor& out) {
    int64_t n = x.dim(0), d = x.dim(1), top_k = ids.dim(1), pairs = n * top_k;
    int count = static_cast<int>(experts.size()), inter = static_cast<int>(experts[0].w1.dim(0));
    const ExpertRows* rows = expert_rows(experts);
    Tensor index = dev_.empty(DType::kI32, {pairs + count + 1});
    int* order = index.data<int>();
    int* offsets = order + pairs;
    launch_pdl(group_pairs_kernel, 1, 1024, 0, dev_.stream(), ids.data<int>(), static_cast<int>(pairs), count, order, offsets);
    bool aligned = d % 8 == 0 && inter % 8 == 0;
    Tensor xb = dev_.split_parts(x.data<float>(), d, n, d);
    Tensor g = dev_.empty(DType::kF32, {pairs, inter}), u = dev_.empty(DType::kF32, {pairs, inter});
    CudaBackend::DetProduct up{xb.data<__nv_bfloat16>(), d, n * d, dev_.gemm_parts(), pairs, nullptr, inter, d, g.data<float>(), inter};
    up.order = order, up.offsets = offsets, up.row_div = static_cast<int>(top_k), up.groups = count;
    up.experts = rows, up.weights_aligned = aligned;
    dev_.launch_det_gemm(up);
    up.which = 1, up.c = u.data<float>();
    dev_.launch_det_gemm(up);
    dev_.swiglu(g, u, limit, g);
    Tensor hb = dev_.split_parts(g.data<float>(), inter, pairs, inter), y = dev_.empty(DType::kF32, {pairs, d});
    CudaBackend::DetProduct down = up;
    down.a = hb.data<__nv_bfloat16>(), down.lda = inter, down.part_stride = pairs * inter, down.row_div = 1;
    down.which = 2, down.n = d, down.k = inter, down.c = y.data<float>(), down.ldc = d;
    dev_.launch_det_gemm(down);
    launch_pdl(moe_weighted_combine_kernel, dim3(n, blocks_for(d, 256)), 256, 0, dev_.stream(), y.data<float>(),
               weights.data<float>(), static_cast<int>(top_k), d, out.data<float>());
}

void MoeFamily::moe_experts_grouped(const Tensor& x, const Tensor& ids, const Tensor& weights, const ExpertRows* rows,
                                    int experts, int inter, float limit, Tensor& out) {
    int64_t n = x.dim(0), d = x.dim(1), top_k = ids.dim(1), pairs = n * top_k;
    Tensor index = dev_.empty(DType::kI32, {pairs + experts + 1});
    int* order = index.data<int>();
    int* offsets = order + pairs;
    launch_pdl(group_pairs_kernel, 1, 1024, 0, dev_.stream(), ids.data<int>(), static_cast<int>(pairs), experts, order,
               offsets);
    Tensor y = dev_.empty(DType::kF32, {pairs, d});
    if (dev_.knobs().moe_grouped_mma) {  // tensor cores on the activations' bf16 parts (as the GEMMs take them)
        Tensor xb = dev_.split_parts(x.data<float>(), d, n, d), hb = dev_.empty(DType::kBF16, {dev_.gemm_parts() * pairs, inter});
        using Launch = decltype(&launch_moe_mma<1, 1>);
        constexpr Launch kLaunch[3][2] = {{launch_moe_mma<1, 1>, launch_moe_mma<1, 4>},
                                          {launch_moe_mma<2, 1>, launch_moe_mma<2, 4>},
                                          {launch_moe_mma<3, 1>, launch_moe_mma<3, 4>}};
        if (dev_.gemm_parts() == 1 && dev_.knobs().moe_staged)
            launch_moe_staged(xb.data<__nv_bfloat16>(), static_cast<int>(d), order, offsets, rows, experts,
                              static_cast<int>(pairs), static_cast<int>(top_k), inter, limit, hb.data<__nv_bfloat16>(),
                              weights.data<float>(), y.data<float>());
        else
            kLaunch[dev_.gemm_parts() - 1][dev_.knobs().moe_mma_steps_in_flight == 4](
                dev_.stream(), xb.data<__nv_bfloat16>(), n, static_cast<int>(d), order, offsets, rows, experts,
                static_cast<int>(top_k), inter, limit, hb.data<__nv_bfloat16>(), pairs, weights.data<float>(), y.data<float>());
        launch_pdl(moe_combine_kernel, dim3(n, blocks_for(d, 256)), 256, 0, dev_.stream(), y.data<float>(),
                   static_cast<int>(top_k), d, out.data<float>());
        return;
    }
    Tensor h = dev_.empty(DType::kF32, {pairs, inter});
    launch_pdl(moe_up_grouped_kernel, dim3(experts, blocks_for(inter, kUpRows)), kThreads, 0, dev_.stream(), x.data<float>(),
               static_cast<int>(d), order, offsets, rows, static_cast<int>(top_k), inter, limit, h.data<float>());
    launch_pdl(moe_down_grouped_kernel, dim3(experts, blocks_for(d, kDownRows)), kThreads, 0, dev_.stream(), h.data<float>(),
               order, offsets, rows, weights.data<float>(), static_cast<int>(d), inter, y.data<float>());
    launch_pdl(moe_combine_kernel, dim3(n, blocks_for(d, 256)), 256, 0, dev_.stream(), y.data<float>(),
               static_cast<int>(top_k), d, out.data<float>());
}

}  // namespace deepinfer::kernels::cuda
