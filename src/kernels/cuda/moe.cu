// MoE on the GPU: routing in one thread per token. Small batches (decode) run the routed experts
// straight from the device-side ids: one warp per weight row, reading each selected expert's bf16
// rows once per (token, slot) — no host round trip. Larger batches group tokens per expert on the
// host (the routing ids are copied back) and run three cuBLAS GEMMs per expert over its gathered
// tokens, with the weighted outputs scattered back.
#include <cuda_bf16.h>

#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

__global__ void route_kernel(const float* logits, const float* bias, const void* tid2eid, bool tid64, const int* tokens,
                             int64_t n, int experts, int top_k, float scaling, int* ids, float* weights) {
    int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const float* l = logits + i * experts;
    auto score = [&](int e) { float x = l[e]; return sqrtf(x > 20.0f ? x : log1pf(expf(x))); };
    int* id = ids + i * top_k;
    if (tid2eid != nullptr) {
        int64_t t = tokens[i];
        for (int j = 0; j < top_k; ++j)
            id[j] = tid64 ? static_cast<int>(static_cast<const long long*>(tid2eid)[t * top_k + j])
                          : static_cast<const int*>(tid2eid)[t * top_k + j];
    } else {
        for (int j = 0; j < top_k; ++j) {  // repeated argmax of score + bias, ties to the lower id
            int best = -1;
            float bv = -INFINITY;
            for (int e = 0; e < experts; ++e) {
                bool taken = false;
                for (int q = 0; q < j; ++q) taken |= id[q] == e;
                float v = score(e) + (bias ? bias[e] : 0.0f);
                if (!taken && (best < 0 || v > bv)) best = e, bv = v;
            }
            id[j] = best;
        }
    }
    float sum = 0;
    for (int j = 0; j < top_k; ++j) sum += score(id[j]);
    for (int j = 0; j < top_k; ++j) weights[i * top_k + j] = score(id[j]) / (sum + 1e-20f) * scaling;
}

// h[pair, i] = silu(min(w1_i · x, limit)) * clamp(w3_i · x, ±limit) for pair = (token, slot).
__global__ void moe_up_kernel(const float* x, const int* ids, const ExpertRows* ex, int top_k, int d, int inter,
                              float limit, float* h) {
    int pair = blockIdx.x, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const float* xt = x + static_cast<long long>(pair / top_k) * d;
    ExpertRows e = ex[ids[pair]];
    for (int i = blockIdx.y * warps + threadIdx.x / 32; i < inter; i += gridDim.y * warps) {
        const __nv_bfloat16* r1 = e.w1 + static_cast<long long>(i) * d;
        const __nv_bfloat16* r3 = e.w3 + static_cast<long long>(i) * d;
        float g = 0, u = 0;
        for (int c = lane; c < d; c += 32) {
            g += __bfloat162float(r1[c]) * xt[c];
            u += __bfloat162float(r3[c]) * xt[c];
        }
        g = fminf(warp_sum(g), limit);
        u = fminf(fmaxf(warp_sum(u), -limit), limit);
        if (lane == 0) h[static_cast<long long>(pair) * inter + i] = g / (1.0f + expf(-g)) * u;
    }
}

// out[token, r] += Σ_slot weight[token, slot] * w2_r · h[(token, slot)].
__global__ void moe_down_kernel(const float* h, const int* ids, const float* weights, const ExpertRows* ex, int top_k,
                                int d, int inter, float* out) {
    int token = blockIdx.x, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (int r = blockIdx.y * warps + threadIdx.x / 32; r < d; r += gridDim.y * warps) {
        float acc = 0;
        for (int s = 0; s < top_k; ++s) {
            int pair = token * top_k + s;
            const __nv_bfloat16* row = ex[ids[pair]].w2 + static_cast<long long>(r) * inter;
            const float* hp = h + static_cast<long long>(pair) * inter;
            float dot = 0;
            for (int c = lane; c < inter; c += 32) dot += __bfloat162float(row[c]) * hp[c];
            acc += weights[pair] * warp_sum(dot);
        }
        if (lane == 0) out[static_cast<long long>(token) * d + r] += acc;
    }
}

__global__ void gather_kernel(const float* x, const int* rows, int64_t d, float* out) {
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) out[blockIdx.x * d + c] = x[rows[blockIdx.x] * d + c];
}

// out[token] += weight * y[r] for the expert's rows (one token appears once per expert).
__global__ void scatter_kernel(const float* y, const int* rows, const float* w, int64_t d, float* out) {
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) out[rows[blockIdx.x] * d + c] += w[blockIdx.x] * y[blockIdx.x * d + c];
}

}  // namespace

void CudaBackend::moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids, int top_k,
                            float scaling, Tensor& ids, Tensor& weights) {
    int64_t n = logits.dim(0);
    if (n == 0) return;
    route_kernel<<<blocks_for(n, 128), 128, 0, stream()>>>(
        logits.data<float>(), bias ? bias->data<float>() : nullptr, tid2eid ? tid2eid->raw() : nullptr,
        tid2eid && tid2eid->dtype() == DType::kI64, token_ids ? token_ids->data<int>() : nullptr, n,
        static_cast<int>(logits.dim(1)), top_k, scaling, ids.data<int>(), weights.data<float>());
}

// The experts' row pointers on the device, uploaded again only when the weights change.
const ExpertRows* CudaBackend::expert_rows(std::span<const ExpertWeights> experts) {
    std::vector<ExpertRows> rows;
    for (const auto& e : experts) {
        if (e.w1.dtype() != DType::kBF16 || e.w3.dtype() != DType::kBF16 || e.w2.dtype() != DType::kBF16) return nullptr;
        rows.push_back({e.w1.data<__nv_bfloat16>(), e.w3.data<__nv_bfloat16>(), e.w2.data<__nv_bfloat16>()});
    }
    auto& cached = expert_rows_[experts.data()];
    if (cached.host.size() != rows.size() ||
        std::memcmp(cached.host.data(), rows.data(), rows.size() * sizeof(ExpertRows)) != 0) {
        cached.host = rows;
        cached.device = empty(DType::kU8, {static_cast<int64_t>(rows.size() * sizeof(ExpertRows))});
        // On the op stream: the allocator hands out memory that is free in this stream's order only.
        copy_to_device(cached.device.raw(), cached.host.data(), rows.size() * sizeof(ExpertRows));
    }
    return static_cast<const ExpertRows*>(cached.device.raw());
}

void CudaBackend::moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                              float limit, Tensor& out) {
    int64_t n = x.dim(0), d = x.dim(1), top_k = ids.dim(1);
    if (n == 0) return;
    constexpr int64_t kMaxDevicePairs = 64;  // beyond this, per-expert GEMMs read each weight once
    const ExpertRows* rows_dev = n * top_k <= kMaxDevicePairs ? expert_rows(experts) : nullptr;
    if (rows_dev != nullptr) {
        int inter = static_cast<int>(experts[0].w1.dim(0)), warps = 8;
        Tensor h = empty(DType::kF32, {n * top_k, inter});
        dim3 up(static_cast<unsigned>(n * top_k), static_cast<unsigned>((inter + warps * 4 - 1) / (warps * 4)));
        moe_up_kernel<<<up, 32 * warps, 0, stream()>>>(x.data<float>(), ids.data<int>(), rows_dev, static_cast<int>(top_k),
                                                       static_cast<int>(d), inter, limit, h.data<float>());
        dim3 down(static_cast<unsigned>(n), static_cast<unsigned>((d + warps * 4 - 1) / (warps * 4)));
        moe_down_kernel<<<down, 32 * warps, 0, stream()>>>(h.data<float>(), ids.data<int>(), weights.data<float>(), rows_dev,
                                                           static_cast<int>(top_k), static_cast<int>(d), inter, out.data<float>());
        return;
    }
    std::vector<int> h_ids(n * top_k);
    std::vector<float> h_w(n * top_k);
    DI_CUDA_CHECK(cudaMemcpyAsync(h_ids.data(), ids.raw(), h_ids.size() * sizeof(int), cudaMemcpyDeviceToHost, stream()));
    DI_CUDA_CHECK(cudaMemcpyAsync(h_w.data(), weights.raw(), h_w.size() * sizeof(float), cudaMemcpyDeviceToHost, stream()));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream()));
    std::vector<std::vector<int>> rows(experts.size());
    std::vector<std::vector<float>> wts(experts.size());
    for (int64_t i = 0; i < n * top_k; ++i) {
        DI_CUDA_REQUIRE(h_ids[i] >= 0 && h_ids[i] < static_cast<int>(experts.size()),
                        "moe: expert id " + std::to_string(h_ids[i]) + " out of range");
        int token = static_cast<int>(i / top_k), e = h_ids[i];
        if (!rows[e].empty() && rows[e].back() == token) {  // the same expert twice (hash routing): one row,
            wts[e].back() += h_w[i];                          // so that a scatter never adds to a row twice
            continue;
        }
        rows[e].push_back(token);
        wts[e].push_back(h_w[i]);
    }
    for (size_t e = 0; e < experts.size(); ++e) {
        int64_t m = static_cast<int64_t>(rows[e].size()), inter = experts[e].w1.dim(0);
        if (m == 0) continue;
        Tensor meta = empty(DType::kI32, {2 * m});
        copy_to_device(meta.raw(), rows[e].data(), m * sizeof(int));
        copy_to_device(meta.data<int>() + m, wts[e].data(), m * sizeof(float));
        Tensor xe = empty(DType::kF32, {m, d}), g = empty(DType::kF32, {m, inter}), u = empty(DType::kF32, {m, inter});
        Tensor ye = empty(DType::kF32, {m, d});
        gather_kernel<<<m, 256, 0, stream()>>>(x.data<float>(), meta.data<int>(), d, xe.data<float>());
        gemm(xe.data<float>(), d, experts[e].w1, g.data<float>(), inter, m);
        gemm(xe.data<float>(), d, experts[e].w3, u.data<float>(), inter, m);
        swiglu(g, u, limit, g);
        gemm(g.data<float>(), inter, experts[e].w2, ye.data<float>(), d, m);
        scatter_kernel<<<m, 256, 0, stream()>>>(ye.data<float>(), meta.data<int>(),
                                                reinterpret_cast<const float*>(meta.data<int>() + m), d, out.data<float>());
    }
}

}  // namespace deepinfer::kernels::cuda
