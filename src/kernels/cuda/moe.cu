// MoE on the GPU: routing in one warp per token. A step of a few (token, slot) pairs runs the
// routed experts straight from the device-side ids: one warp per weight row, reading each selected
// expert's bf16 rows once per pair. Larger steps group the pairs by expert on the device
// (moe_grouped.cu). Neither returns to the host. Longer steps copy the routing to the host and run
// grouped tensor-core GEMMs over all experts (moe_gemm.cu); experts that are not bf16 loop over
// three GEMMs per expert.
#include <cuda_bf16.h>

#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kMaxExpertsPerLane = 32;  // routing takes up to 1024 experts

__device__ float route_score(float x) { return sqrtf(x > 20.0f ? x : log1pf(expf(x))); }

// One warp per token: each lane scores experts lane, lane + 32, ...; the top k are taken by
// repeated warp-wide argmax of score + bias (ties to the lower id); weights from the plain scores.
__global__ void route_kernel(const float* logits, const float* bias, const void* tid2eid, bool tid64, const int* tokens,
                             int64_t n, int experts, int top_k, float scaling, int* ids, float* weights) {
    pdl_prologue();
    int lane = threadIdx.x % 32;
    int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
    if (i >= n) return;
    const float* l = logits + i * experts;
    int* id = ids + i * top_k;
    int mine = 0;  // lane j: the id of pick j
    if (tid2eid != nullptr) {
        int64_t t = tokens[i];
        for (int j = lane; j < top_k; j += 32)
            id[j] = mine = tid64 ? static_cast<int>(static_cast<const long long*>(tid2eid)[t * top_k + j])
                                 : static_cast<const int*>(tid2eid)[t * top_k + j];
    } else {
        float v[kMaxExpertsPerLane];
        int per_lane = (experts + 31) / 32;
        for (int j = 0; j < per_lane; ++j) {
            int e = lane + 32 * j;
            v[j] = e < experts ? route_score(l[e]) + (bias ? bias[e] : 0.0f) : 0.0f;
        }
        unsigned taken = 0;
        for (int k = 0; k < top_k; ++k) {
            float bv = -INFINITY;
            int bi = -1;
            for (int j = 0; j < per_lane; ++j) {
                int e = lane + 32 * j;
                if (e < experts && !(taken >> j & 1u) && (bi < 0 || v[j] > bv)) bv = v[j], bi = e;
            }
            for (int o = 16; o > 0; o >>= 1) {
                float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
            }
            if (lane == k) mine = bi;  // every lane holds the winner after the butterfly
            if (bi >= 0 && bi % 32 == lane) taken |= 1u << (bi / 32);
        }
    }
    // Lane j < top_k holds pick j: scores, their sum and the weights without a round trip through
    // memory (top_k <= 32, checked by the caller).
    bool picked = lane < top_k;
    float score = picked ? route_score(l[mine]) : 0.0f;
    float sum = warp_sum(score);
    if (!picked) return;
    if (tid2eid == nullptr) id[lane] = mine;
    weights[i * top_k + lane] = score / (sum + 1e-20f) * scaling;
}

bool all_bf16(std::span<const ExpertWeights> experts) {
    for (const auto& e : experts)
        if (e.w1.dtype() != DType::kBF16 || e.w3.dtype() != DType::kBF16 || e.w2.dtype() != DType::kBF16) return false;
    return true;
}

// h[pair, i] = silu(min(w1_i · x, limit)) * clamp(w3_i · x, ±limit) for pair = (token, slot).
// With a shared expert (shared.w1 non-null) every token has one more slot, after its routed ones,
// whose rows are known before the routing: with `prefetch` its blocks start them loading into L2
// before the PDL wait (CudaKernelConfig::moe_shared_prefetch, off: measured slower in the step).
// Rows are read with 16-byte loads: d and inter are multiples of 8 on this path.
template <bool Shared, int Unroll>
__global__ void moe_up_kernel(const float* x, const int* ids, const ExpertRows* ex, ExpertRows shared, int top_k, int d,
                              int inter, float limit, bool prefetch, float* h) {
    pdl_launch_dependents();
    int pair = blockIdx.x, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    int slots = top_k + Shared, token = pair / slots, slot = pair % slots;
    int first_row = blockIdx.y * warps + threadIdx.x / 32;
    if (Shared && prefetch && slot == top_k && first_row < inter && lane < 2)
        prefetch_l2((lane == 0 ? shared.w1 : shared.w3) + static_cast<long long>(first_row) * d, d * 2);
    pdl_wait();
    const float* xt = x + static_cast<long long>(token) * d;
    ExpertRows e = !Shared ? ex[ids[pair]] : slot == top_k ? shared : ex[ids[token * top_k + slot]];
    for (int i = first_row; i < inter; i += gridDim.y * warps) {
        const __nv_bfloat16* r1 = e.w1 + static_cast<long long>(i) * d;
        const __nv_bfloat16* r3 = e.w3 + static_cast<long long>(i) * d;
        float g = 0, u = 0;
#pragma unroll Unroll
        for (int c = lane * 8; c < d; c += 256) {
            uint4 a = load_weights(r1 + c), b = load_weights(r3 + c);
            float4 lo = *reinterpret_cast<const float4*>(xt + c), hi = *reinterpret_cast<const float4*>(xt + c + 4);
            g += dot8(a, lo, hi);
            u += dot8(b, lo, hi);
        }
        g = fminf(warp_sum(g), limit);
        u = fminf(fmaxf(warp_sum(u), -limit), limit);
        if (lane == 0) h[static_cast<long long>(pair) * inter + i] = g / (1.0f + expf(-g)) * u;
    }
}

// out[token, r] (+)= Σ_slot weight[token, slot] * w2_r · h[(token, slot)], the shared expert's
// slot (if any) last with weight 1. Each slot's matrix and weight are looked up per row (cached
// loads; a per-warp table of them would sit in local memory).
constexpr int kMaxDownSlots = 17;  // top_k <= 16 plus the shared expert

template <bool Shared, int Unroll>
__global__ void moe_down_kernel(const float* h, const int* ids, const float* weights, const ExpertRows* ex,
                                ExpertRows shared, int top_k, int d, int inter, bool accumulate, bool prefetch, float* out) {
    pdl_launch_dependents();
    int token = blockIdx.x, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    int slots = top_k + Shared, first_row = blockIdx.y * warps + threadIdx.x / 32;
    if (Shared && prefetch && first_row < d && lane == 0)
        prefetch_l2(shared.w2 + static_cast<long long>(first_row) * inter, inter * 2);
    pdl_wait();
    for (int r = first_row; r < d; r += gridDim.y * warps) {
        float acc = 0;  // one reduction for all slots: each slot's weight scales its products
        for (int s = 0; s < slots; ++s) {
            int pair = token * top_k + s;
            const __nv_bfloat16* w2 = !Shared || s < top_k ? ex[ids[pair]].w2 : shared.w2;
            const __nv_bfloat16* row = w2 + static_cast<long long>(r) * inter;
            const float* hp = h + static_cast<long long>(token * slots + s) * inter;
            float ws = !Shared || s < top_k ? weights[pair] : 1.0f;
#pragma unroll Unroll
            for (int c = lane * 8; c < inter; c += 256)
                acc += ws * dot8(load_weights(row + c), *reinterpret_cast<const float4*>(hp + c),
                                 *reinterpret_cast<const float4*>(hp + c + 4));
        }
        acc = warp_sum(acc);
        float* o = out + static_cast<long long>(token) * d + r;
        if (lane == 0) *o = accumulate ? *o + acc : acc;
    }
}

__global__ void gather_kernel(const float* x, const int* rows, int64_t d, float* out) {
    pdl_prologue();
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) out[blockIdx.x * d + c] = x[rows[blockIdx.x] * d + c];
}

// out[token] += weight * y[r] for the expert's rows (one token appears once per expert).
__global__ void scatter_kernel(const float* y, const int* rows, const float* w, int64_t d, float* out) {
    pdl_prologue();
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) out[rows[blockIdx.x] * d + c] += w[blockIdx.x] * y[blockIdx.x * d + c];
}

}  // namespace

void MoeFamily::moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids, int top_k,
                          float scaling, Tensor& ids, Tensor& weights) {
    int64_t n = logits.dim(0);
    if (n == 0) return;
    DI_CUDA_REQUIRE(logits.dim(1) <= 32 * kMaxExpertsPerLane, "cuda moe_route: more than 1024 experts");
    DI_CUDA_REQUIRE(top_k <= 32, "cuda moe_route: more than 32 experts per token");
    launch_pdl(route_kernel, blocks_for(n, 4), 128, 0, dev_.stream(), logits.data<float>(),
               bias ? bias->data<float>() : nullptr, tid2eid ? tid2eid->raw() : nullptr,
               tid2eid && tid2eid->dtype() == DType::kI64, token_ids ? token_ids->data<int>() : nullptr, n,
               static_cast<int>(logits.dim(1)), top_k, scaling, ids.data<int>(), weights.data<float>());
}

// The experts' row pointers on the device, uploaded again only when the weights change.
const ExpertRows* MoeFamily::expert_rows(std::span<const ExpertWeights> experts) {
    if (!all_bf16(experts)) return nullptr;
    std::vector<ExpertRows> rows;
    for (const auto& e : experts) {
        rows.push_back({e.w1.data<__nv_bfloat16>(), e.w3.data<__nv_bfloat16>(), e.w2.data<__nv_bfloat16>()});
    }
    auto& cached = expert_rows_[experts.data()];
    if (cached.host.size() != rows.size() ||
        std::memcmp(cached.host.data(), rows.data(), rows.size() * sizeof(ExpertRows)) != 0) {
        cached.host = rows;
        cached.device = dev_.empty(DType::kU8, {static_cast<int64_t>(rows.size() * sizeof(ExpertRows))});
        // On the op stream: the allocator hands out memory that is free in this stream's order only.
        dev_.copy_to_device(cached.device.raw(), cached.host.data(), rows.size() * sizeof(ExpertRows));
    }
    return static_cast<const ExpertRows*>(cached.device.raw());
}

void MoeFamily::moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                            float limit, Tensor& out) {
    int64_t n = x.dim(0), d = x.dim(1), top_k = ids.dim(1);
    if (n == 0) return;
    // Up to kMaxPerPairs (token, slot) pairs each pair reads its expert's rows (fewest launches;
    // few experts are shared); up to max_grouped pairs are grouped by expert on the device.
    // Longer steps (prefill) and rows that are not whole 16-byte loads copy the routing to the host
    // and run grouped tensor-core GEMMs (moe_gemm.cu); weights that are not bf16 loop over experts.
    // The limits are where the measured winner changes (docs/benchmarks.md); the staged kernels
    // of the fast precision can take more pairs (knob moe_staged_max_pairs), but lost to the
    // GEMMs' host round trip when measured.
    int64_t max_grouped = dev_.gemm_parts() == 1 && dev_.knobs().moe_staged ? dev_.knobs().moe_staged_max_pairs : 1024;
    int64_t pairs = n * top_k;
    if (dev_.invariant() && all_bf16(experts)) {  // other weights: the per-expert loop below is invariant too
        moe_experts_invariant(x, ids, weights, experts, limit, out);
        return;
    }
    bool vector_rows = d % 8 == 0 && experts[0].w1.dim(0) % 8 == 0;
    const ExpertRows* rows_dev =
        vector_rows && pairs <= max_grouped && top_k < kMaxDownSlots ? expert_rows(experts) : nullptr;
    int inter = static_cast<int>(experts[0].w1.dim(0));
    if (rows_dev != nullptr && pairs > kMaxPerPairs) {
        moe_experts_grouped(x, ids, weights, rows_dev, static_cast<int>(experts.size()), inter, limit, out);
        return;
    }
    if (rows_dev != nullptr) {
        moe_per_pair(x, ids, weights, rows_dev, ExpertRows{}, inter, limit, out);
        return;
    }
    std::vector<int> h_ids(n * top_k);
    std::vector<float> h_w(n * top_k);
    dev_.graphs().flush();  // the routing has to run before the host reads it
    DI_CUDA_CHECK(cudaMemcpyAsync(h_ids.data(), ids.raw(), h_ids.size() * sizeof(int), cudaMemcpyDeviceToHost, dev_.stream()));
    DI_CUDA_CHECK(cudaMemcpyAsync(h_w.data(), weights.raw(), h_w.size() * sizeof(float), cudaMemcpyDeviceToHost, dev_.stream()));
    DI_CUDA_CHECK(cudaStreamSynchronize(dev_.stream()));
    for (int id : h_ids)
        DI_CUDA_REQUIRE(id >= 0 && id < static_cast<int>(experts.size()), "moe: expert id " + std::to_string(id) + " out of range");
    ExpertTokens by_expert{std::vector<std::vector<int>>(experts.size()), std::vector<std::vector<float>>(experts.size())};
    auto& rows = by_expert.tokens;
    auto& wts = by_expert.weights;
    for (int64_t i = 0; i < n * top_k; ++i) {
        int token = static_cast<int>(i / top_k), e = h_ids[i];
        if (!rows[e].empty() && rows[e].back() == token) {  // the same expert twice (hash routing): one row,
            wts[e].back() += h_w[i];                          // so that a scatter never adds to a row twice
            continue;
        }
        rows[e].push_back(token);
        wts[e].push_back(h_w[i]);
    }
    if (all_bf16(experts)) {  // not dev_.invariant(): that returned above
        moe_experts_gemm(x, by_expert, static_cast<int>(top_k), experts, limit, out);
        return;
    }
    for (size_t e = 0; e < experts.size(); ++e) {
        int64_t m = static_cast<int64_t>(rows[e].size()), inter = experts[e].w1.dim(0);
        if (m == 0) continue;
        Tensor meta = dev_.empty(DType::kI32, {2 * m});
        dev_.copy_to_device(meta.raw(), rows[e].data(), m * sizeof(int));
        dev_.copy_to_device(meta.data<int>() + m, wts[e].data(), m * sizeof(float));
        Tensor xe = dev_.empty(DType::kF32, {m, d}), g = dev_.empty(DType::kF32, {m, inter}), u = dev_.empty(DType::kF32, {m, inter});
        Tensor ye = dev_.empty(DType::kF32, {m, d});
        launch_pdl(gather_kernel, m, 256, 0, dev_.stream(), x.data<float>(), meta.data<int>(), d, xe.data<float>());
        dev_.gemm(xe.data<float>(), d, experts[e].w1, g.data<float>(), inter, m);
        dev_.gemm(xe.data<float>(), d, experts[e].w3, u.data<float>(), inter, m);
        dev_.swiglu(g, u, limit, g);
        dev_.gemm(g.data<float>(), inter, experts[e].w2, ye.data<float>(), d, m);
        launch_pdl(scatter_kernel, m, 256, 0, dev_.stream(), ye.data<float>(), meta.data<int>(),
                   reinterpret_cast<const float*>(meta.data<int>() + m), d, out.data<float>());
    }
}

// Up to kMaxPerPairs (token, slot) pairs: each pair reads its expert's rows (one warp per row),
// plus the shared expert's slot per token when `shared` has rows.
void MoeFamily::moe_per_pair(const Tensor& x, const Tensor& ids, const Tensor& weights, const ExpertRows* rows,
                             ExpertRows shared, int inter, float limit, Tensor& out) {
    bool with_shared = shared.w1 != nullptr;
    int64_t n = x.dim(0), d = x.dim(1), top_k = ids.dim(1), slots = top_k + with_shared;
    constexpr int kWarpsPerBlock = 8;
    Tensor h = dev_.empty(DType::kF32, {n * slots, inter});
    // Without a shared slot the kernels compile without its branches (measured: batch 8 of the
    // flash-dims checkpoint ran its up-projection 17% slower with them in).
    dim3 up(static_cast<unsigned>(n * slots), static_cast<unsigned>((inter + kWarpsPerBlock - 1) / kWarpsPerBlock));
    // [shared slot][unroll 8] (CudaKernelConfig::moe_up_unroll / moe_down_unroll: loads in flight per lane).
    using UpKernel = decltype(&moe_up_kernel<false, 4>);
    using DownKernel = decltype(&moe_down_kernel<false, 4>);
    constexpr UpKernel kUp[2][2] = {{moe_up_kernel<false, 4>, moe_up_kernel<false, 8>},
                                    {moe_up_kernel<true, 4>, moe_up_kernel<true, 8>}};
    constexpr DownKernel kDown[2][2] = {{moe_down_kernel<false, 4>, moe_down_kernel<false, 8>},
                                        {moe_down_kernel<true, 4>, moe_down_kernel<true, 8>}};
    launch_pdl(kUp[with_shared][dev_.knobs().moe_up_unroll == 8], up, 32 * kWarpsPerBlock, 0, dev_.stream(),
               x.data<float>(), ids.data<int>(), rows, shared, static_cast<int>(top_k), static_cast<int>(d), inter, limit,
               dev_.knobs().moe_shared_prefetch, h.data<float>());
    dim3 down(static_cast<unsigned>(n), static_cast<unsigned>((d + kWarpsPerBlock - 1) / kWarpsPerBlock));
    launch_pdl(kDown[with_shared][dev_.knobs().moe_down_unroll == 8], down, 32 * kWarpsPerBlock, 0, dev_.stream(),
               h.data<float>(), ids.data<int>(), weights.data<float>(), rows, shared, static_cast<int>(top_k),
               static_cast<int>(d), inter, !with_shared, dev_.knobs().moe_shared_prefetch, out.data<float>());
}

void MoeFamily::moe_ffn(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                        const ExpertWeights& shared, float limit, Tensor& out) {
    int64_t n = x.dim(0), d = x.dim(1), top_k = ids.dim(1);
    int inter = static_cast<int>(experts[0].w1.dim(0));
    ExpertWeights one[] = {shared};
    // One token only: the per-pair kernels read an expert's rows once per token, so for more
    // tokens the shared expert's GEMV (rows read once for all) wins (measured on the H200: batch 8
    // of the flash-dims checkpoint 8.5 ms with it as a slot, 7.7 ms as a GEMV).
    bool fits = !dev_.invariant() && n == 1 && top_k < kMaxDownSlots && d % 8 == 0 && inter % 8 == 0 && all_bf16(one) &&
                shared.w1.dim(0) == inter;
    const ExpertRows* rows = fits ? expert_rows(experts) : nullptr;
    if (rows == nullptr) {  // longer steps: the shared expert's GEMMs, then the routed path
        dev_.Backend::moe_ffn(x, ids, weights, experts, shared, limit, out);
        return;
    }
    ExpertRows s{shared.w1.data<__nv_bfloat16>(), shared.w3.data<__nv_bfloat16>(), shared.w2.data<__nv_bfloat16>()};
    moe_per_pair(x, ids, weights, rows, s, inter, limit, out);
}

// The backend's ops: one each, timed and recorded as such.
void CudaBackend::moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids, int top_k,
                            float scaling, Tensor& ids, Tensor& weights) {
    DI_CUDA_OP("moe_route");
    moe_->moe_route(logits, bias, tid2eid, token_ids, top_k, scaling, ids, weights);
}

void CudaBackend::moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                              float limit, Tensor& out) {
    DI_CUDA_OP("moe_experts");
    moe_->moe_experts(x, ids, weights, experts, limit, out);
}

void CudaBackend::moe_ffn(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                          const ExpertWeights& shared, float limit, Tensor& out) {
    DI_CUDA_OP("moe_ffn");
    moe_->moe_ffn(x, ids, weights, experts, shared, limit, out);
}

}  // namespace deepinfer::kernels::cuda
