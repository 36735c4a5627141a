// The host sampler (runtime/sampler.h has the definition) and the CPU backend's sampling ops.
// Built with -ffp-contract=off: its float arithmetic must round exactly as the device's does.
#include "kernels/cpu/cpu_sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/sampling_math.h"

namespace deepinfer::kernels::cpu {
namespace {

using namespace sampling;

bool is_greedy(const SampleRow& row) { return row.temperature <= 0.0f || row.top_k == 1; }

// The first of the largest values (comparisons only: the lower id wins ties).
int32_t first_max_index(std::span<const float> v) {
    size_t best = 0;
    for (size_t i = 1; i < v.size(); ++i)
        if (v[i] > v[best]) best = i;
    return static_cast<int32_t>(best);
}

// The logits with the row's bias and penalties; the raw logits when it has neither.
std::vector<float> processed_logits(std::span<const float> logits, const SampleRow& row,
                                    std::span<const LogitBias> bias, const uint32_t* words) {
    std::vector<float> z(logits.begin(), logits.end());
    if (words == nullptr && bias.empty()) return z;
    Penalties pen{row.repetition_penalty, row.presence_penalty, row.frequency_penalty};
    for (size_t i = 0; i < z.size(); ++i) z[i] = processed_logit(logits[i], 0.0f, words ? words[i] : 0u, pen);
    for (const LogitBias& b : bias) z[b.token] = processed_logit(logits[b.token], b.bias, words ? words[b.token] : 0u, pen);
    return z;
}

// The `k` first ids in the order of `v` descending, ties to the lower id, in that order.
std::vector<int32_t> top_ids(std::span<const float> v, size_t k) {
    std::vector<int32_t> ids(v.size());
    std::iota(ids.begin(), ids.end(), 0);
    k = std::min(k, ids.size());
    auto before = [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
    std::nth_element(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k - 1), ids.end(), before);
    ids.resize(k);
    std::sort(ids.begin(), ids.end(), before);
    return ids;
}

// The prefix of the probability order that top-k and top-p keep: the first top_k ids, cut after
// the first id where the running weight reaches top_p_weight(top_p, total). Sorts only as much of
// the order as it needs: 256 ids, then four times more until the cut is found.
std::vector<int32_t> top_k_top_p_prefix(std::span<const float> e, std::span<const uint64_t> w, uint64_t total,
                                        const SampleRow& row) {
    size_t vocab = e.size();
    size_t limit = row.top_k > 0 && static_cast<size_t>(row.top_k) < vocab ? static_cast<size_t>(row.top_k) : vocab;
    if (row.top_p >= 1.0f) return top_ids(e, limit);
    uint64_t need = top_p_weight(row.top_p, total);
    for (size_t m = std::min<size_t>(limit, 256);; m = std::min(limit, m * 4)) {
        std::vector<int32_t> ids = top_ids(e, m);
        uint64_t cum = 0;
        for (size_t i = 0; i < ids.size(); ++i) {
            cum += w[ids[i]];
            if (cum >= need) {
                ids.resize(i + 1);
                return ids;
            }
        }
        if (m == limit) return ids;
    }
}

// The kept weights of a sampled (not greedy) row from its processed logits z (0 where not kept).
std::vector<uint64_t> kept_of(std::span<const float> z, const SampleRow& row) {
    float max_z = -INFINITY;
    for (float v : z)
        if (v > max_z) max_z = v;
    int shift = weight_shift(static_cast<int64_t>(z.size()));
    std::vector<float> e(z.size());
    std::vector<uint64_t> w(z.size());
    uint64_t total = 0;
    for (size_t i = 0; i < z.size(); ++i) {
        e[i] = relative_probability(z[i], max_z, row.temperature);
        total += w[i] = weight_of(e[i], shift);
    }
    bool min_p = row.min_p > 0.0f;
    std::vector<uint64_t> kept(z.size(), 0);  // the weights of the kept tokens, 0 elsewhere
    if ((row.top_k > 0 && static_cast<size_t>(row.top_k) < z.size()) || row.top_p < 1.0f) {
        for (int32_t id : top_k_top_p_prefix(e, w, total, row))
            if (!min_p || e[id] >= row.min_p) kept[id] = w[id];
    } else {
        for (size_t i = 0; i < z.size(); ++i)
            if (!min_p || e[i] >= row.min_p) kept[i] = w[i];
    }
    return kept;
}

}  // namespace

std::vector<uint64_t> kept_weights(std::span<const float> logits, const SampleRow& row, std::span<const LogitBias> bias,
                                   const uint32_t* words) {
    std::vector<float> z = processed_logits(logits, row, bias, words);
    if (!is_greedy(row)) return kept_of(z, row);
    std::vector<uint64_t> one(z.size(), 0);
    one[first_max_index(z)] = 1;
    return one;
}

int32_t draw_weighted(std::span<const uint64_t> weights, uint64_t bits53) {
    uint64_t total = std::accumulate(weights.begin(), weights.end(), uint64_t{0});
    if (total == 0) return 0;  // only when no logit is finite
    uint64_t target = draw_target(bits53, total), cum = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
        cum += weights[i];
        if (cum > target) return static_cast<int32_t>(i);
    }
    return 0;  // not reached: cum ends at total > target
}

void fill_logprobs(std::span<const float> logits, int top, SampledToken& out) {
    double max_l = -INFINITY;
    for (float v : logits) max_l = std::max(max_l, static_cast<double>(v));
    double sum = 0.0;
    for (float v : logits) sum += std::exp(v - max_l);
    double log_z = max_l + std::log(sum);
    out.logprob = static_cast<float>(logits[out.token] - log_z);
    if (top <= 0) return;
    for (int32_t id : top_ids(logits, static_cast<size_t>(top))) out.top.emplace_back(id, static_cast<float>(logits[id] - log_z));
}

SampledToken sample_row(std::span<const float> logits, const SampleRow& row, std::span<const LogitBias> bias,
                        const uint32_t* words) {
    std::vector<float> z = processed_logits(logits, row, bias, words);
    SampledToken out;
    out.token = is_greedy(row) ? first_max_index(z)
                               : draw_weighted(kept_of(z, row), random_bits53(row.seed, static_cast<uint64_t>(row.position)));
    if (row.logprobs >= 0) fill_logprobs(logits, row.logprobs, out);
    return out;
}

void check_sample_args(const SampleArgs& a) {
    int64_t vocab = a.logits.dim(-1), rows = a.logits.numel() / std::max<int64_t>(vocab, 1);
    DI_CHECK(vocab > 0 && static_cast<size_t>(rows) == a.rows.size() && a.tokens.numel() == rows,
             "sample_rows: logits {} for {} rows -> tokens {}", a.logits.shape_string(), a.rows.size(),
             a.tokens.shape_string());
    for (const SampleRow& r : a.rows) {
        DI_CHECK(r.bias_begin >= 0 && r.bias_count >= 0 && static_cast<size_t>(r.bias_begin + r.bias_count) <= a.bias.size(),
                 "sample_rows: bias entries out of range");
        DI_CHECK(r.penalty_slot < 0 || (a.penalty_state.defined() && r.penalty_slot < a.penalty_state.dim(0) &&
                                        a.penalty_state.dim(-1) == vocab),
                 "sample_rows: penalty slot {} without a matching state", r.penalty_slot);
        DI_CHECK(r.logprobs < 0 || a.logprobs.numel() == rows, "sample_rows: logprobs asked without an output");
        DI_CHECK(r.logprobs <= 0 || (a.top_tokens.dim(0) == rows && a.top_tokens.dim(-1) >= r.logprobs &&
                                     a.top_logprobs.numel() == a.top_tokens.numel()),
                 "sample_rows: {} top logprobs asked without room for them", r.logprobs);
    }
    for (const LogitBias& b : a.bias) DI_CHECK(b.token >= 0 && b.token < vocab, "sample_rows: bias token {} out of range", b.token);
}

void store_sampled(const SampleArgs& a, int64_t row, const SampledToken& t) {
    a.tokens.data<int32_t>()[row] = t.token;
    if (a.rows[row].logprobs >= 0) a.logprobs.data<float>()[row] = t.logprob;
    int64_t width = a.top_tokens.defined() ? a.top_tokens.dim(-1) : 0;
    for (size_t i = 0; i < t.top.size(); ++i) {
        a.top_tokens.data<int32_t>()[row * width + static_cast<int64_t>(i)] = t.top[i].first;
        a.top_logprobs.data<float>()[row * width + static_cast<int64_t>(i)] = t.top[i].second;
    }
    if (a.rows[row].penalty_slot >= 0) ++a.penalty_state.data<uint32_t>()[a.rows[row].penalty_slot * a.logits.dim(-1) + t.token];
}

void reset_penalty_words(uint32_t* words, int64_t vocab, std::span<const int32_t> prompt, std::span<const int32_t> output) {
    std::fill(words, words + vocab, 0u);
    for (int32_t t : prompt) {
        DI_CHECK(t >= 0 && t < vocab, "reset_penalties: token {} out of range", t);
        words[t] |= kInPromptBit;
    }
    for (int32_t t : output) {
        DI_CHECK(t >= 0 && t < vocab, "reset_penalties: token {} out of range", t);
        ++words[t];
    }
}

void CpuBackend::sample_rows(const SampleArgs& a) {
    check_sample_args(a);
    int64_t vocab = a.logits.dim(-1), rows = static_cast<int64_t>(a.rows.size());
    std::vector<SampledToken> out(a.rows.size());
    pool_.parallel_for(rows, 1, [&](int64_t s, int64_t e) {
        for (int64_t r = s; r < e; ++r) {
            const SampleRow& row = a.rows[r];
            const uint32_t* words = row.penalty_slot >= 0 ? a.penalty_state.data<uint32_t>() + row.penalty_slot * vocab : nullptr;
            out[r] = sample_row({a.logits.data<float>() + r * vocab, static_cast<size_t>(vocab)}, row,
                                a.bias.subspan(row.bias_begin, row.bias_count), words);
        }
    });
    for (int64_t r = 0; r < rows; ++r) store_sampled(a, r, out[r]);
}

void CpuBackend::reset_penalties(Tensor& state, int32_t slot, std::span<const int32_t> prompt, std::span<const int32_t> output) {
    DI_CHECK(slot >= 0 && slot < state.dim(0), "reset_penalties: slot {} of {}", slot, state.dim(0));
    reset_penalty_words(state.data<uint32_t>() + slot * state.dim(-1), state.dim(-1), prompt, output);
}

}  // namespace deepinfer::kernels::cpu
