// The sampler against the definitions: empirical frequencies over many (seed, position) draws
// follow the filtered, renormalised softmax; penalties and bias move the right logits; logprobs
// are the raw log-softmax.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "runtime/rng.h"

namespace deepinfer::runtime {
namespace {

std::vector<float> logits_for(const std::vector<double>& probs) {
    std::vector<float> l;
    for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
    return l;
}

std::map<int32_t, double> frequencies(const std::vector<float>& logits, const SamplingParams& p, int draws) {
    std::map<int32_t, double> f;
    for (int i = 0; i < draws; ++i) {
        SampleInput in{logits, &p, static_cast<uint64_t>(i / 100), i % 100, {}, {}};
        f[sample_token(in).token] += 1.0 / draws;
    }
    return f;
}

TEST(Rng, IsAPureFunctionOfSeedAndPosition) {
    EXPECT_EQ(uniform01(5, 17), uniform01(5, 17));
    EXPECT_NE(uniform01(5, 17), uniform01(5, 18));
    EXPECT_NE(uniform01(5, 17), uniform01(6, 17));
    double mean = 0;
    for (int i = 0; i < 100000; ++i) mean += uniform01(1, i) / 100000;
    EXPECT_NEAR(mean, 0.5, 0.005);
}

TEST(Sampler, GreedyTakesTheArgmaxLowestIdOnTies) {
    SamplingParams p;
    p.temperature = 0;
    std::vector<float> l = {0.5f, 2.0f, 2.0f, -1.0f};
    EXPECT_EQ(sample_token({l, &p, 1, 0, {}, {}}).token, 1);
}

TEST(Sampler, FrequenciesFollowTheFilteredDistribution) {
    std::vector<float> l = logits_for({0.5, 0.3, 0.15, 0.05});
    SamplingParams p;
    auto f = frequencies(l, p, 20000);
    EXPECT_NEAR(f[0], 0.5, 0.02);
    EXPECT_NEAR(f[3], 0.05, 0.01);
    p.temperature = 2.0f;  // flattens: p ∝ sqrt(p0)
    double z = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.15) + std::sqrt(0.05);
    EXPECT_NEAR(frequencies(l, p, 20000)[0], std::sqrt(0.5) / z, 0.02);
    p = {};
    p.top_k = 2;
    f = frequencies(l, p, 20000);
    EXPECT_NEAR(f[0], 0.625, 0.02);
    EXPECT_EQ(f.count(2) + f.count(3), 0u);
    p = {};
    p.top_p = 0.75f;  // 0.5 + 0.3 passes 0.75: two candidates
    f = frequencies(l, p, 20000);
    EXPECT_NEAR(f[1], 0.375, 0.02);
    EXPECT_EQ(f.count(2), 0u);
    p = {};
    p.min_p = 0.25f;  // keeps p >= 0.125: three candidates
    f = frequencies(l, p, 20000);
    EXPECT_NEAR(f[2], 0.15 / 0.95, 0.015);
    EXPECT_EQ(f.count(3), 0u);
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
