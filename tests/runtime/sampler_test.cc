// The host sampler against the definitions: token frequencies over 10^5 (seed, position) draws
// pass a chi-square test against the exact filtered, renormalised softmax (computed on its own in
// double arithmetic), with and without penalties and bias; penalties and bias move the right
// logits; logprobs are the raw log-softmax.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "base/error.h"
#include "kernels/sampling_math.h"
#include "runtime/penalty_slots.h"
#include "runtime/sequence.h"
#include "tests/sampling_stats.h"

namespace deepinfer::runtime {
namespace {

using kernels::sampling::random_bits53;

// Token counts of `draws` samples, each at its own position under one seed.
std::vector<int64_t> counts_of(const std::vector<float>& logits, const SamplingParams& p, int draws,
                               std::span<const int32_t> prompt = {}, std::span<const int32_t> output = {}) {
    std::vector<int64_t> counts(logits.size(), 0);
    for (int i = 0; i < draws; ++i) counts[sample_token({logits, &p, 1234, i, prompt, output}).token]++;
    return counts;
}

std::vector<float> random_logits(int vocab, float scale, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> l(static_cast<size_t>(vocab));
    for (float& v : l) v = dist(rng);
    return l;
}

TEST(Rng, IsAPureFunctionOfSeedAndPosition) {
    EXPECT_EQ(random_bits53(5, 17), random_bits53(5, 17));
    EXPECT_NE(random_bits53(5, 17), random_bits53(5, 18));
    EXPECT_NE(random_bits53(5, 17), random_bits53(6, 17));
    double mean = 0;
    for (int i = 0; i < 100000; ++i) mean += static_cast<double>(random_bits53(1, i)) * 0x1.0p-53 / 100000;
    EXPECT_NEAR(mean, 0.5, 0.005);
}

TEST(Sampler, GreedyTakesTheArgmaxLowestIdOnTies) {
    SamplingParams p;
    p.temperature = 0;
    std::vector<float> l = {0.5f, 2.0f, 2.0f, -1.0f};
    EXPECT_EQ(sample_token({l, &p, 1, 0, {}, {}}).token, 1);
}

// 10^5 draws per configuration: temperature, top-k, top-p, min-p and their combinations.
TEST(Sampler, FrequenciesFollowTheExactDistribution) {
    std::vector<float> l = random_logits(500, 2.5f, 7);
    std::vector<double> z(l.begin(), l.end());
    auto params = [](float t, int k, float top_p, float min_p) {
        SamplingParams p;
        p.temperature = t, p.top_k = k, p.top_p = top_p, p.min_p = min_p;
        return p;
    };
    for (const SamplingParams& p : {params(1.0f, 0, 1.0f, 0.0f), params(0.6f, 40, 1.0f, 0.0f), params(1.0f, 0, 0.8f, 0.0f),
                                    params(1.3f, 0, 1.0f, 0.02f), params(0.9f, 100, 0.9f, 0.01f)}) {
        constexpr int kDraws = 100000;
        std::vector<double> expect = test::exact_distribution(z, {p.temperature, p.top_k, p.top_p, p.min_p});
        test::ChiSquare c = test::chi_square(expect, counts_of(l, p, kDraws), kDraws);
        EXPECT_TRUE(c.passes()) << c.describe() << "; temperature " << p.temperature << " top_k " << p.top_k << " top_p "
                                << p.top_p << " min_p " << p.min_p;
    }
}

// Penalties over the prompt and output and a logit bias change the logits as defined; the draws
// follow the softmax of the changed logits (10^5 draws).
TEST(Sampler, PenalizedFrequenciesFollowTheExactDistribution) {
    std::vector<float> l = random_logits(500, 2.0f, 8);
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_p = 0.95f;
    p.repetition_penalty = 1.4f;
    p.presence_penalty = 0.7f;
    p.frequency_penalty = 0.3f;
    std::vector<int32_t> by_value(l.size());
    std::iota(by_value.begin(), by_value.end(), 0);
    std::sort(by_value.begin(), by_value.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    // Penalised and biased tokens among the most probable, where the changes show.
    std::vector<int32_t> prompt = {by_value[0], by_value[3], by_value[7], 300};
    std::vector<int32_t> output = {by_value[1], by_value[1], by_value[1], by_value[3], by_value[12]};
    p.logit_bias = {{by_value[2], -1.5f}, {by_value[40], 3.0f}, {by_value[5], 0.5f}};
    std::vector<double> z(l.begin(), l.end());
    for (const auto& [t, b] : p.logit_bias) z[t] += b;
    std::map<int32_t, int> seen_in_output;
    for (int32_t t : output) seen_in_output[t]++;
    std::set<int32_t> seen(prompt.begin(), prompt.end());
    seen.insert(output.begin(), output.end());
    for (int32_t t : seen) z[t] = z[t] > 0 ? z[t] / p.repetition_penalty : z[t] * p.repetition_penalty;
    for (const auto& [t, c] : seen_in_output) z[t] -= p.frequency_penalty * c + p.presence_penalty;
    constexpr int kDraws = 100000;
    std::vector<double> expect = test::exact_distribution(z, {p.temperature, 0, p.top_p, 0.0});
    test::ChiSquare c = test::chi_square(expect, counts_of(l, p, kDraws, prompt, output), kDraws);
    EXPECT_TRUE(c.passes()) << c.describe();
}

TEST(Sampler, PenaltiesAndBias) {
    SamplingParams p;
    p.temperature = 0;
    std::vector<float> l = {3.0f, 2.9f, 1.0f};
    std::vector<int32_t> prompt = {0}, output = {1, 1};
    p.repetition_penalty = 1.2f;  // only prompt token 0 is penalised: 3.0 / 1.2 = 2.5 < 2.9
    EXPECT_EQ(sample_token({l, &p, 0, 0, prompt, {}}).token, 1);
    std::vector<float> negative = {-1.0f, -1.1f};  // negative logits are multiplied: -1.2 < -1.1
    EXPECT_EQ(sample_token({negative, &p, 0, 0, prompt, {}}).token, 1);
    p.repetition_penalty = 1.0f;
    p.logit_bias = {{2, 2.5f}};  // 1.0 + 2.5 = 3.5 wins
    EXPECT_EQ(sample_token({l, &p, 0, 0, {}, {}}).token, 2);
    p.logit_bias.clear();
    std::vector<float> l2 = {3.0f, 3.5f, 1.0f};
    p.frequency_penalty = 0.3f;  // 3.5 - 2 * 0.3 = 2.9 < 3.0
    EXPECT_EQ(sample_token({l2, &p, 0, 0, {}, output}).token, 0);
    p.frequency_penalty = 0;
    p.presence_penalty = 0.4f;  // 3.5 - 0.4 = 3.1 > 3.0
    EXPECT_EQ(sample_token({l2, &p, 0, 0, {}, output}).token, 1);
}

TEST(Sampler, LogprobsAreRawLogSoftmax) {
    std::vector<float> l = {1.0f, 2.0f, 0.5f, -1.0f};
    SamplingParams p;
    p.temperature = 0;
    p.logprobs = 2;
    p.logit_bias = {{0, 5.0f}};  // changes the choice, not the reported distribution
    SampleOutput out = sample_token({l, &p, 0, 0, {}, {}});
    double z = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(0.5) + std::exp(-1.0));
    EXPECT_EQ(out.token, 0);
    EXPECT_NEAR(out.logprob, 1.0 - z, 1e-5);
    ASSERT_EQ(out.top.size(), 2u);
    EXPECT_EQ(out.top[0].token, 1);
    EXPECT_NEAR(out.top[0].logprob, 2.0 - z, 1e-5);
    EXPECT_EQ(out.top[1].token, 0);
}

// Rows of penalty state: a sequence keeps its row (rewritten after a preemption); a new one takes
// a free row, else the row sampled longest ago, never one of the current step; a released row is
// free again.
TEST(PenaltySlots, KeepsRowsAndTakesOverTheLeastRecentlySampled) {
    std::vector<Sequence> seqs(4);
    PenaltySlots slots(2);
    bool fresh = false;
    int a = slots.acquire(&seqs[0], 1, fresh);
    EXPECT_TRUE(fresh);
    int b = slots.acquire(&seqs[1], 1, fresh);
    EXPECT_TRUE(fresh);
    EXPECT_NE(a, b);
    EXPECT_EQ(slots.acquire(&seqs[1], 2, fresh), b);
    EXPECT_FALSE(fresh);
    EXPECT_EQ(slots.acquire(&seqs[0], 2, fresh), a);
    EXPECT_FALSE(fresh);
    EXPECT_THROW(slots.acquire(&seqs[2], 2, fresh), Error);  // both rows are sampled in step 2
    EXPECT_EQ(slots.acquire(&seqs[0], 3, fresh), a);
    EXPECT_EQ(slots.acquire(&seqs[2], 4, fresh), b);          // seqs[1] was sampled longest ago
    EXPECT_TRUE(fresh);
    EXPECT_EQ(slots.acquire(&seqs[1], 5, fresh), a);          // its history is written again
    EXPECT_TRUE(fresh);
    ++seqs[2].preemptions;  // its history is written again when it next samples
    EXPECT_EQ(slots.acquire(&seqs[2], 5, fresh), b);
    EXPECT_TRUE(fresh);
    EXPECT_EQ(slots.acquire(&seqs[2], 6, fresh), b);
    EXPECT_FALSE(fresh);
    slots.release(&seqs[2]);
    EXPECT_EQ(slots.acquire(&seqs[3], 7, fresh), b);
    EXPECT_TRUE(fresh);
    slots.release_all();
    EXPECT_EQ(slots.acquire(&seqs[1], 8, fresh), 0);
    EXPECT_TRUE(fresh);
}

TEST(SamplingParams, ValidationNamesTheField) {
    SamplingParams p;
    EXPECT_EQ(p.validate(100), "");
    p.temperature = -1;
    EXPECT_NE(p.validate(100).find("temperature"), std::string::npos);
    p = {};
    p.logit_bias = {{100, 1.0f}};
    EXPECT_NE(p.validate(100).find("logit_bias"), std::string::npos);
    p = {};
    p.n = 0;
    EXPECT_NE(p.validate(100).find("n must"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::runtime
