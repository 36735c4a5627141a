#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/ref/ref_backend.h"
#include "kernels/ref/ref_backend_impl.h"

namespace deepinfer::kernels::ref {

void RefBackend::moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids,
                           int top_k, float scaling, Tensor& ids, Tensor& weights) {
    int64_t n = logits.dim(0), experts = logits.dim(1);
    for (int64_t i = 0; i < n; ++i) {
        std::vector<double> score(experts);
        for (int64_t e = 0; e < experts; ++e) {
            double l = logits.data<float>()[i * experts + e];
            score[e] = std::sqrt(l > 20.0 ? l : std::log1p(std::exp(l)));
        }
        std::vector<int32_t> chosen;
        if (tid2eid != nullptr) {
            int64_t tok = token_ids->data<int32_t>()[i];
            for (int j = 0; j < top_k; ++j)
                chosen.push_back(static_cast<int32_t>(tid2eid->dtype() == DType::kI64 ? tid2eid->data<int64_t>()[tok * top_k + j]
                                                                                       : tid2eid->data<int32_t>()[tok * top_k + j]));
        } else {
            std::vector<std::pair<double, int32_t>> sel;
            for (int64_t e = 0; e < experts; ++e)
                sel.emplace_back(-(score[e] + (bias ? bias->data<float>()[e] : 0.0)), static_cast<int32_t>(e));
            std::sort(sel.begin(), sel.end());
            for (int j = 0; j < top_k; ++j) chosen.push_back(sel[j].second);
        }
        double sum = 0.0;
        for (int32_t e : chosen) sum += score[e];
        for (int j = 0; j < top_k; ++j) {
            ids.data<int32_t>()[i * top_k + j] = chosen[j];
            weights.data<float>()[i * top_k + j] = static_cast<float>(score[chosen[j]] / (sum + 1e-20) * scaling);
        }
    }
}

void RefBackend::moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                             std::span<const ExpertWeights> experts, float limit, Tensor& out) {
    int64_t n = x.dim(0), d = x.dim(1), top_k = ids.dim(1);
    for (int64_t i = 0; i < n; ++i) {
        const float* xi = x.data<float>() + i * d;
        for (int64_t j = 0; j < top_k; ++j) {
            const ExpertWeights& ex = experts[ids.data<int32_t>()[i * top_k + j]];
            int64_t inter = ex.w1.dim(0);
            std::vector<double> act(inter);
            for (int64_t r = 0; r < inter; ++r) {
                double g = 0.0, u = 0.0;
                for (int64_t c = 0; c < d; ++c) {
                    g += xi[c] * weight_value(ex.w1, r * d + c);
                    u += xi[c] * weight_value(ex.w3, r * d + c);
                }
                g = std::min<double>(static_cast<float>(g), limit);
                u = std::clamp<double>(static_cast<float>(u), -limit, limit);
                act[r] = g / (1.0 + std::exp(-g)) * u;
            }
            for (int64_t c = 0; c < d; ++c) {
                double y = 0.0;
                for (int64_t r = 0; r < inter; ++r) y += act[r] * weight_value(ex.w2, c * inter + r);
                out.data<float>()[i * d + c] += static_cast<float>(weights.data<float>()[i * top_k + j] * y);
            }
        }
    }
}

}  // namespace deepinfer::kernels::ref

namespace deepinfer::kernels {

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ref::RefBackend>(); }

}  // namespace deepinfer::kernels
