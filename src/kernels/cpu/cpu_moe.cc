// Mixture-of-experts routing and expert computation on the CPU. Tokens are grouped by expert so
// each expert runs three GEMMs over just its tokens; the weighted outputs are scattered back.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/math.h"

namespace deepinfer::kernels::cpu {
namespace {

int64_t table_at(const Tensor& t, int64_t i) {
    return t.dtype() == DType::kI64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
}

}  // namespace

void CpuBackend::moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids,
                           int top_k, float scaling, Tensor& ids, Tensor& weights) {
    int64_t n = logits.dim(0), experts = logits.dim(1);
    DI_CHECK(top_k <= experts, "moe_route: top_k {} > {} experts", top_k, experts);
    pool_.parallel_for(n, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> score(experts), select(experts);
        std::vector<int32_t> order(experts);
        for (int64_t i = begin; i < end; ++i) {
            const float* l = logits.data<float>() + i * experts;
            for (int64_t e = 0; e < experts; ++e) score[e] = std::sqrt(softplus(l[e]));
            int32_t* id = ids.data<int32_t>() + i * top_k;
            if (tid2eid != nullptr) {
                int64_t tok = token_ids->data<int32_t>()[i];
                for (int j = 0; j < top_k; ++j) {
                    int64_t e = table_at(*tid2eid, tok * top_k + j);
                    DI_CHECK(e >= 0 && e < experts, "tid2eid maps token {} to expert {} of {}", tok, e, experts);
                    id[j] = static_cast<int32_t>(e);
                }
            } else {
                for (int64_t e = 0; e < experts; ++e) select[e] = score[e] + (bias ? bias->data<float>()[e] : 0.0f);
                std::iota(order.begin(), order.end(), 0);
                std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
                    return select[a] > select[b] || (select[a] == select[b] && a < b);
                });
                std::copy(order.begin(), order.begin() + top_k, id);
            }
            float sum = 0.0f;
            for (int j = 0; j < top_k; ++j) sum += score[id[j]];
            float* w = weights.data<float>() + i * top_k;
            for (int j = 0; j < top_k; ++j) w[j] = score[id[j]] / (sum + 1e-20f) * scaling;
        }
    });
}

void CpuBackend::moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                             std::span<const ExpertWeights> experts, float limit, Tensor& out) {
    int64_t n = x.dim(0), d = x.dim(1), top_k = ids.dim(1);
    std::vector<std::vector<int64_t>> assigned(experts.size());  // flat (token * top_k + slot) per expert
    for (int64_t i = 0; i < n * top_k; ++i) {
        int32_t e = ids.data<int32_t>()[i];
        DI_CHECK(e >= 0 && e < static_cast<int32_t>(experts.size()), "moe: expert id {} out of range", e);
        assigned[e].push_back(i);
    }
    std::vector<float> xe, gate, up, act, ye;
    for (size_t e = 0; e < experts.size(); ++e) {
        const auto& rows = assigned[e];
        if (rows.empty()) continue;
        int64_t m = static_cast<int64_t>(rows.size()), inter = experts[e].w1.dim(0);
        xe.resize(m * d);
        for (int64_t r = 0; r < m; ++r)
            std::copy_n(x.data<float>() + (rows[r] / top_k) * d, d, xe.data() + r * d);
        gate.resize(m * inter);
        up.resize(m * inter);
        act.resize(m * inter);
        ye.resize(m * d);
        gemm(xe.data(), d, experts[e].w1, gate.data(), inter, m);
        gemm(xe.data(), d, experts[e].w3, up.data(), inter, m);
        for (int64_t i = 0; i < m * inter; ++i)
            act[i] = silu(std::min(gate[i], limit)) * std::clamp(up[i], -limit, limit);
        gemm(act.data(), inter, experts[e].w2, ye.data(), d, m);
        for (int64_t r = 0; r < m; ++r) {
            float w = weights.data<float>()[rows[r]];
            float* o = out.data<float>() + (rows[r] / top_k) * d;
            for (int64_t c = 0; c < d; ++c) o[c] += w * ye[r * d + c];
        }
    }
}

}  // namespace deepinfer::kernels::cpu
