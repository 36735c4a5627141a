// Reference sampling: runtime/sampler.h's definition step by step over the whole vocabulary (a
// dense bias row, a full sort of the probability order, a walk for the kept prefix). Built with
// -ffp-contract=off, as the host sampler.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/cpu_sampler.h"
#include "kernels/ref/ref_backend_impl.h"
#include "kernels/sampling_math.h"

namespace deepinfer::kernels::ref {
namespace {

using namespace sampling;

// Every id, in the order of `v` descending, ties to the lower id.
std::vector<int32_t> descending_order(const std::vector<float>& v) {
    std::vector<int32_t> ids(v.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
    return ids;
}

// How many ids of the probability order top-k, top-p and min-p keep (the shortest of the three).
size_t kept_length(const std::vector<int32_t>& order, const std::vector<float>& e, const std::vector<uint64_t>& w,
                   uint64_t total, const SampleRow& row) {
    size_t n = order.size();
    if (row.top_k > 0) n = std::min(n, static_cast<size_t>(row.top_k));
    if (row.top_p < 1.0f) {
        uint64_t need = top_p_weight(row.top_p, total), cum = 0;
        for (size_t i = 0; i < order.size(); ++i) {
            cum += w[order[i]];
            if (cum >= need) {
                n = std::min(n, i + 1);
                break;
            }
        }
    }
    if (row.min_p > 0.0f) {
        size_t above = 0;
        while (above < order.size() && e[order[above]] >= row.min_p) ++above;
        n = std::min(n, above);
    }
    return n;
}

int32_t reference_token(std::span<const float> logits, const SampleRow& row, std::span<const LogitBias> bias,
                        const uint32_t* words) {
    int64_t vocab = static_cast<int64_t>(logits.size());
    std::vector<float> z(logits.begin(), logits.end());
    if (words != nullptr || !bias.empty()) {
        std::vector<float> dense_bias(z.size(), 0.0f);
        for (const LogitBias& b : bias) dense_bias[b.token] = b.bias;
        Penalties pen{row.repetition_penalty, row.presence_penalty, row.frequency_penalty};
        for (int64_t i = 0; i < vocab; ++i) z[i] = processed_logit(logits[i], dense_bias[i], words ? words[i] : 0u, pen);
    }
    if (row.temperature <= 0.0f || row.top_k == 1) return descending_order(z)[0];
    float max_z = z[descending_order(z)[0]];
    std::vector<float> e(z.size());
    std::vector<uint64_t> w(z.size());
    uint64_t total = 0;
    for (int64_t i = 0; i < vocab; ++i) {
        e[i] = relative_probability(z[i], max_z, row.temperature);
        w[i] = weight_of(e[i], weight_shift(vocab));
        total += w[i];
    }
    std::vector<int32_t> order = descending_order(e);
    std::vector<bool> kept(z.size(), false);
    size_t n = kept_length(order, e, w, total, row);
    for (size_t i = 0; i < n; ++i) kept[order[i]] = true;
    uint64_t kept_total = 0;
    for (int64_t i = 0; i < vocab; ++i) kept_total += kept[i] ? w[i] : 0;
    if (kept_total == 0) return 0;
    uint64_t target = draw_target(random_bits53(row.seed, static_cast<uint64_t>(row.position)), kept_total), cum = 0;
    for (int64_t i = 0; i < vocab; ++i) {
        cum += kept[i] ? w[i] : 0;
        if (cum > target) return static_cast<int32_t>(i);
    }
    return 0;
}

}  // namespace

void RefBackend::sample_rows(const SampleArgs& a) {
    cpu::check_sample_args(a);
    int64_t vocab = a.logits.dim(-1);
    for (size_t r = 0; r < a.rows.size(); ++r) {
        const SampleRow& row = a.rows[r];
        std::span<const float> logits(a.logits.data<float>() + r * vocab, static_cast<size_t>(vocab));
        const uint32_t* words = row.penalty_slot >= 0 ? a.penalty_state.data<uint32_t>() + row.penalty_slot * vocab : nullptr;
        cpu::SampledToken t;
        t.token = reference_token(logits, row, a.bias.subspan(row.bias_begin, row.bias_count), words);
        if (row.logprobs >= 0) {
            double max_l = *std::max_element(logits.begin(), logits.end()), sum = 0.0;
            for (float v : logits) sum += std::exp(v - max_l);
            double log_z = max_l + std::log(sum);
            t.logprob = static_cast<float>(logits[t.token] - log_z);
            std::vector<int32_t> order = descending_order(std::vector<float>(logits.begin(), logits.end()));
            for (int i = 0; i < row.logprobs && i < vocab; ++i) t.top.emplace_back(order[i], static_cast<float>(logits[order[i]] - log_z));
        }
        cpu::store_sampled(a, static_cast<int64_t>(r), t);
    }
}

void RefBackend::reset_penalties(Tensor& state, int32_t slot, std::span<const int32_t> prompt,
                                 std::span<const int32_t> output) {
    cpu::reset_penalty_words(state.data<uint32_t>() + slot * state.dim(-1), state.dim(-1), prompt, output);
}

}  // namespace deepinfer::kernels::ref
