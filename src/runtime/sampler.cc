#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "runtime/rng.h"

namespace deepinfer::runtime {
namespace {

bool better(const std::vector<float>& v, int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); }

void apply_penalties(std::vector<float>& logits, const SampleInput& in) {
    const SamplingParams& p = *in.params;
    for (const auto& [tok, bias] : p.logit_bias) logits[tok] += bias;
    if (p.repetition_penalty != 1.0f) {
        std::unordered_set<int32_t> seen(in.prompt.begin(), in.prompt.end());
        seen.insert(in.output.begin(), in.output.end());
        for (int32_t t : seen) logits[t] = logits[t] > 0 ? logits[t] / p.repetition_penalty : logits[t] * p.repetition_penalty;
    }
    if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
        std::unordered_map<int32_t, int> counts;
        for (int32_t t : in.output) ++counts[t];
        for (const auto& [t, c] : counts) logits[t] -= p.frequency_penalty * c + p.presence_penalty;
    }
}

// The `k` best ids by value, best first.
std::vector<int32_t> top_ids(const std::vector<float>& v, size_t k) {
    std::vector<int32_t> ids(v.size());
    std::iota(ids.begin(), ids.end(), 0);
    k = std::min(k, ids.size());
    auto cmp = [&](int32_t a, int32_t b) { return better(v, a, b); };
    std::nth_element(ids.begin(), ids.begin() + (k - 1), ids.end(), cmp);
    ids.resize(k);
    std::sort(ids.begin(), ids.end(), cmp);
    return ids;
}

// Candidates left by top-k and top-p over probabilities `prob`: best first when a filter needs
// the order, else every token in id order (no sort of the whole vocabulary).
std::vector<int32_t> filtered_candidates(const std::vector<float>& prob, const SamplingParams& p) {
    size_t vocab = prob.size();
    size_t limit = p.top_k > 0 ? std::min<size_t>(p.top_k, vocab) : vocab;
    if (p.top_p >= 1.0f && limit == vocab) {
        std::vector<int32_t> all(vocab);
        std::iota(all.begin(), all.end(), 0);
        return all;
    }
    if (p.top_p >= 1.0f) return top_ids(prob, limit);
    for (size_t m = std::min<size_t>(limit, 256);; m = std::min(limit, m * 4)) {
        std::vector<int32_t> ids = top_ids(prob, m);
        double cum = 0.0;
        for (size_t i = 0; i < ids.size(); ++i) {
            cum += prob[ids[i]];
            if (cum >= p.top_p) {
                ids.resize(i + 1);
                return ids;
            }
        }
        if (m == limit) return ids;
    }
}

void fill_logprobs(std::span<const float> logits, int n_top, SampleOutput& out) {
    double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (float l : logits) sum += std::exp(l - mx);
    double log_z = mx + std::log(sum);
    out.logprob = static_cast<float>(logits[out.token] - log_z);
    if (n_top <= 0) return;
    std::vector<float> copy(logits.begin(), logits.end());
    for (int32_t id : top_ids(copy, static_cast<size_t>(n_top))) out.top.push_back({id, static_cast<float>(copy[id] - log_z)});
}

}  // namespace

SampleOutput sample_token(const SampleInput& in) {
    const SamplingParams& p = *in.params;
    std::vector<float> logits(in.logits.begin(), in.logits.end());
    apply_penalties(logits, in);
    SampleOutput out;
    if (p.temperature <= 0.0f || p.top_k == 1) {
        out.token = top_ids(logits, 1)[0];
    } else {
        double mx = *std::max_element(logits.begin(), logits.end());
        std::vector<float> prob(logits.size());
        double sum = 0.0;
        for (size_t i = 0; i < logits.size(); ++i) sum += prob[i] = static_cast<float>(std::exp((logits[i] - mx) / p.temperature));
        for (float& x : prob) x = static_cast<float>(x / sum);
        std::vector<int32_t> cand = filtered_candidates(prob, p);
        if (p.min_p > 0.0f) {
            float floor = p.min_p * *std::max_element(prob.begin(), prob.end());
            std::erase_if(cand, [&](int32_t t) { return prob[t] < floor; });
        }
        double total = 0.0;
        for (int32_t t : cand) total += prob[t];
        double target = uniform01(in.seed, static_cast<uint64_t>(in.position)) * total, acc = 0.0;
        out.token = cand.back();
        for (int32_t t : cand) {
            acc += prob[t];
            if (acc > target) {
                out.token = t;
                break;
            }
        }
    }
    if (p.logprobs >= 0) fill_logprobs(in.logits, p.logprobs, out);
    return out;
}

}  // namespace deepinfer::runtime
