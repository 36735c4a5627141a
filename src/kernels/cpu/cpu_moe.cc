// Mixture-of-experts routing and expert computation on the CPU. Tokens are grouped by expert so
// each expert runs three GEMMs over just its tokens (all experts' gate and up products in one
// dispatch, then all down products); the weighted outputs are scattered back.
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
    // Every active expert's tokens gathered into one block each, so that all gate / up products,
    // then all down products, run as one pool dispatch apiece.
    struct Active { size_t e; int64_t row0, m, inter, inter0; };
    std::vector<Active> active;
    int64_t rows = 0, inter_total = 0;
    for (size_t e = 0; e < experts.size(); ++e) {
        if (assigned[e].empty()) continue;
        int64_t m = static_cast<int64_t>(assigned[e].size()), inter = experts[e].w1.dim(0);
        active.push_back({e, rows, m, inter, inter_total});
        rows += m;
        inter_total += m * inter;
    }
    // Kept across calls: growing them is the only time they are touched by the allocator (a prefill
    // step's buffers are tens of MB, whose fresh pages cost more than the products).
    std::vector<float>& xe = moe_scratch_.tokens;
    std::vector<float>& gate = moe_scratch_.gate;
    std::vector<float>& up = moe_scratch_.up;
    std::vector<float>& ye = moe_scratch_.out;
    for (auto [v, size] : {std::pair{&xe, rows * d}, {&gate, inter_total}, {&up, inter_total}, {&ye, rows * d}})
        if (static_cast<int64_t>(v->size()) < size) v->resize(size);
    for (const Active& a : active)
        for (int64_t r = 0; r < a.m; ++r)
            std::copy_n(x.data<float>() + (assigned[a.e][r] / top_k) * d, d, xe.data() + (a.row0 + r) * d);
    auto product = [&](const Tensor& w, const float* in, int64_t k, float* y, int64_t m) {
        return GemmArgs{.x = in, .lda = k, .w = w.raw(), .ldw = w.dim(-1), .w_dtype = w.dtype(), .y = y,
                        .ldy = w.dim(0), .m = m, .n = w.dim(0), .k = k,
                        .bf16_activations = bf16_activations(), .q8_activations = int8_activations()};
    };
    std::vector<GemmArgs> products;
    for (const Active& a : active) {
        const float* in = xe.data() + a.row0 * d;
        products.push_back(product(experts[a.e].w1, in, d, gate.data() + a.inter0, a.m));
        products.push_back(product(experts[a.e].w3, in, d, up.data() + a.inter0, a.m));
    }
    cpu::gemm_batch(pool_, isa_, products, &q8_scratch_);
    for (int64_t i = 0; i < inter_total; ++i) gate[i] = silu(std::min(gate[i], limit)) * std::clamp(up[i], -limit, limit);
    products.clear();
    for (const Active& a : active)
        products.push_back(product(experts[a.e].w2, gate.data() + a.inter0, a.inter, ye.data() + a.row0 * d, a.m));
    cpu::gemm_batch(pool_, isa_, products, &q8_scratch_);
    for (const Active& a : active) {
        for (int64_t r = 0; r < a.m; ++r) {
            int64_t slot = assigned[a.e][r];
            float w = weights.data<float>()[slot];
            float* o = out.data<float>() + (slot / top_k) * d;
            const float* y = ye.data() + (a.row0 + r) * d;
            for (int64_t c = 0; c < d; ++c) o[c] += w * y[c];
        }
    }
}

}  // namespace deepinfer::kernels::cpu
