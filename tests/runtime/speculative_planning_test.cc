// Speculative decoding's parts, apart from the engine: the n-gram drafter and the refusal of
// unknown drafters, the cost models and planners of confidence-scheduled verification (against
// brute force), and the rejection rule for draft distributions (the emitted tokens follow the
// target whatever the draft; a broken residual or keeping every draft fails the same chi-square
// test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>

#include "base/error.h"
#include "kernels/cpu/cpu_sampler.h"
#include "runtime/speculative/drafter.h"
#include "runtime/speculative/rejection.h"
#include "runtime/speculative/verify_planner.h"
#include "tests/sampling_stats.h"
#include "tests/test_util.h"

namespace deepinfer::test {
namespace {

// --- the drafter ---------------------------------------------------------------------------

TEST(NgramDrafter, ProposesWhatFollowedTheLatestEarlierOccurrenceOfTheLongestSuffix) {
    runtime::NgramDrafter d(1, 3);
    // "7 8 9" occurred at 0 (followed by 1 2) and at 5 (followed by 4 4 4): the latest wins.
    std::vector<int32_t> t = {7, 8, 9, 1, 2, 7, 8, 9, 4, 4, 4, 0, 7, 8, 9};
    EXPECT_EQ(d.propose(t, 2), (std::vector<int32_t>{4, 4}));
    EXPECT_EQ(d.propose(t, 10), (std::vector<int32_t>{4, 4, 4, 0, 7, 8, 9}));
    // Only a 1-gram matches: "5" after "3 5"? no; the last token 9 ... here the suffix 3 is new.
    EXPECT_TRUE(d.propose(std::vector<int32_t>{1, 2, 3}, 4).empty());
    EXPECT_EQ(d.propose(std::vector<int32_t>{1, 2, 6, 1}, 4), (std::vector<int32_t>{2, 6, 1}));
    EXPECT_TRUE(d.propose(t, 0).empty());
    runtime::NgramDrafter longest_only(3, 3);
    EXPECT_TRUE(longest_only.propose(std::vector<int32_t>{1, 2, 6, 1}, 4).empty());
}

TEST(NgramDrafter, EveryProposalContinuesAnEarlierOccurrenceOfTheSuffix) {
    std::mt19937 rng(5);
    runtime::NgramDrafter d(1, 4);
    for (int trial = 0; trial < 2000; ++trial) {
        std::vector<int32_t> t(1 + rng() % 60);
        for (auto& x : t) x = static_cast<int32_t>(rng() % 6);
        int max = 1 + static_cast<int>(rng() % 8);
        std::vector<int32_t> p = d.propose(t, max);
        ASSERT_LE(static_cast<int>(p.size()), max);
        if (p.empty()) {  // then not even the last token occurred before (a 1-gram match)
            EXPECT_EQ(std::count(t.begin(), t.end() - 1, t.back()), 0);
            continue;
        }
        bool found = false;  // some n in [1, 4] and an earlier position where the suffix is followed by p
        for (size_t n = 1; n <= 4 && n < t.size() && !found; ++n)
            for (size_t at = 0; at + n < t.size() && !found; ++at)
                found = std::equal(t.end() - n, t.end(), t.begin() + at) && at + n + p.size() <= t.size() &&
                        std::equal(p.begin(), p.end(), t.begin() + at + n);
        EXPECT_TRUE(found);
    }
}

TEST(SpeculativeConfig, UnknownOrMissingDraftersAreRefused) {
    SpeculativeConfig c;
    c.method = "bogus";
    EXPECT_THROW(runtime::make_drafter(c), Error);
    c.method = "ngram";
    c.num_draft_tokens = 0;
    EXPECT_THROW(runtime::make_drafter(c), Error);
    c.num_draft_tokens = 4;
    EXPECT_NE(runtime::make_drafter(c), nullptr);
    c.method = "off";
    EXPECT_EQ(runtime::make_drafter(c), nullptr);
}

// --- confidence-scheduled verification ------------------------------------------------------

TEST(StepCostModel, MeasuredCountsInterpolatedBetweenFlatAboveAndStaleWhenOld) {
    runtime::StepCostModel m;
    EXPECT_FALSE(m.ready());
    for (int i = 0; i < 3; ++i) m.record(1, 1.0), m.record(11, 3.0);
    ASSERT_TRUE(m.ready());
    EXPECT_DOUBLE_EQ(m.seconds(1), 1.0);
    EXPECT_DOUBLE_EQ(m.seconds(6), 2.0);   // halfway between the measured 1 and 11
    EXPECT_DOUBLE_EQ(m.seconds(40), 3.0);  // above the largest: optimistic, so it gets tried
    m.record(6, 5.0);                      // one sample is not a measurement yet
    EXPECT_DOUBLE_EQ(m.seconds(6), 2.0);
    m.record(6, 5.0);
    EXPECT_DOUBLE_EQ(m.seconds(6), 5.0);
    // A count not measured for long is stale: the others decide (here: above 6, flat).
    for (int i = 0; i < 600; ++i) m.record(1, 1.0), m.record(6, 5.0);
    EXPECT_DOUBLE_EQ(m.seconds(11), 5.0);
    m.record(11, 3.0);  // a fresh sample replaces a stale average almost whole
    EXPECT_NEAR(m.seconds(11), 3.0, 1e-6);
}

// An average measured every step moves slowly; one not measured for long takes its next sample
// almost whole (a count or length the planner seldom chooses must not keep a cold estimate).
TEST(StepCostModel, ASeldomMeasuredCountTakesMostOfItsNextSample) {
    runtime::StepCostModel step;
    runtime::DraftCostModel draft;
    step.record(2, 1.0), step.record(2, 1.0), draft.record(1, 1, 1.0);
    step.record(2, 2.0), draft.record(1, 1, 2.0);
    EXPECT_NEAR(step.seconds(2), 1.1, 1e-12);  // measured just before: 10% of the new sample
    EXPECT_NEAR(draft.seconds(1, 1), 1.2, 1e-12);
    for (int i = 0; i < 60; ++i) step.record(9, 5.0), draft.record(4, 1, 5.0);
    step.record(2, 3.0), draft.record(1, 1, 3.0);
    EXPECT_NEAR(step.seconds(2), 3.0, 0.01);
    EXPECT_NEAR(draft.seconds(1, 1), 3.0, 0.01);
}

// Brute force over every per-sequence length: the plan's expected tokens per second is the best
// among the plans that admit drafts in order of their chance (Algorithm 1's search space).
TEST(VerifyPlanner, PicksTheBestOrderedPrefixOfDrafts) {
    std::mt19937 rng(3);
    for (int trial = 0; trial < 300; ++trial) {
        runtime::StepCostModel cost;
        double fixed = 1.0 + rng() % 5, per_token = (rng() % 3) * 0.3;  // flat (GPU-like) to steep
        for (int b = 1; b <= 40; ++b) cost.record(b, fixed + per_token * b), cost.record(b, fixed + per_token * b);
        std::vector<std::vector<double>> conf(1 + rng() % 4);
        for (auto& c : conf) {
            c.resize(rng() % 5);
            for (auto& x : c) x = std::uniform_real_distribution<double>(0.05, 1.0)(rng);
        }
        int64_t base = static_cast<int64_t>(conf.size());
        std::vector<int> plan = runtime::plan_verify_lengths(conf, base, cost);
        auto rate = [&](const std::vector<int>& lengths) {
            double tokens = static_cast<double>(base);
            int64_t rows = base;
            for (size_t r = 0; r < conf.size(); ++r) {
                double a = 1.0;
                for (int j = 0; j < lengths[r]; ++j) tokens += (a *= conf[r][j]), ++rows;
            }
            return tokens / cost.seconds(rows);
        };
        ASSERT_EQ(plan.size(), conf.size());
        for (size_t r = 0; r < conf.size(); ++r) ASSERT_LE(plan[r], static_cast<int>(conf[r].size()));
        double best = 0;
        std::vector<int> lengths(conf.size(), 0);
        std::function<void(size_t)> search = [&](size_t r) {
            if (r == conf.size()) return void(best = std::max(best, rate(lengths)));
            for (int l = 0; l <= static_cast<int>(conf[r].size()); ++l) lengths[r] = l, search(r + 1);
        };
        search(0);
        // Greedy by chance is optimal when the cost depends only on the number of rows (exchange argument).
        EXPECT_NEAR(rate(plan), best, 1e-9 * best) << "trial " << trial;
        if (per_token == 0) {  // flat: every draft is worth it
            for (size_t r = 0; r < conf.size(); ++r) EXPECT_EQ(plan[r], static_cast<int>(conf[r].size()));
        }
    }
}

TEST(DraftCostModel, MeasuredLengthsInterpolatedAndExtrapolatedAlongTheNearestLine) {
    runtime::DraftCostModel m;
    EXPECT_FALSE(m.ready());
    m.record(3, 1, 4.0);
    ASSERT_TRUE(m.ready());
    EXPECT_DOUBLE_EQ(m.seconds(3, 1), 4.0);
    EXPECT_DOUBLE_EQ(m.seconds(1, 1), 2.0);  // one length known: proportional to K + 1
    EXPECT_DOUBLE_EQ(m.seconds(7, 1), 8.0);
    m.record(1, 1, 3.0);                     // now a line through (1, 3) and (3, 4)
    EXPECT_DOUBLE_EQ(m.seconds(2, 1), 3.5);
    EXPECT_DOUBLE_EQ(m.seconds(0, 1), 2.5);
    EXPECT_DOUBLE_EQ(m.seconds(7, 1), 6.0);
    m.record(5, 1, 4.0);                     // flat beyond 3: the nearest two points decide
    EXPECT_DOUBLE_EQ(m.seconds(8, 1), 4.0);
    m.record(5, 1, 9.0);                     // a moving average: 0.8 * 4 + 0.2 * 9
    EXPECT_DOUBLE_EQ(m.seconds(5, 1), 5.0);
}

// The number of drafting sequences swings (prefills, finished requests): each power-of-two bucket
// of it keeps its own costs, and one not measured borrows the nearest measured bucket's.
TEST(DraftCostModel, CostsAreKeptPerNumberOfSequences) {
    runtime::DraftCostModel m;
    m.record(2, 50, 9.0);  // bucket 32..63
    m.record(2, 5, 3.0);   // bucket 4..7
    EXPECT_DOUBLE_EQ(m.seconds(2, 40), 9.0);
    EXPECT_DOUBLE_EQ(m.seconds(2, 6), 3.0);
    EXPECT_DOUBLE_EQ(m.seconds(2, 12), 3.0);   // 8..15: nearest is 4..7
    EXPECT_DOUBLE_EQ(m.seconds(2, 200), 9.0);  // above every bucket: the largest
    EXPECT_DOUBLE_EQ(m.seconds(5, 1), 6.0);    // below: the smallest, proportional to K + 1
}

// The chosen length against every length's expected tokens per second, computed here from the
// same costs; a drafter whose cost grows with K drafts less than one whose cost does not.
TEST(DraftLengthPlanner, PicksTheLengthWithTheMostExpectedTokensPerSecond) {
    std::mt19937 rng(5);
    int shorter = 0;
    for (int trial = 0; trial < 300; ++trial) {
        runtime::StepCostModel step;
        double fixed = 1.0 + rng() % 5, per_token = (rng() % 3) * 0.05;
        for (int b = 1; b <= 80; ++b) step.record(b, fixed + per_token * b), step.record(b, fixed + per_token * b);
        std::vector<double> conf(1 + rng() % 7);
        for (auto& x : conf) x = std::uniform_real_distribution<double>(0.05, 1.0)(rng);
        int64_t n = 1 + rng() % 8;
        double base = 0.1 * (rng() % 10), per_position = 0.1 * (1 + rng() % 10);
        runtime::DraftCostModel sequential, parallel;
        for (int k = 0; k <= static_cast<int>(conf.size()); ++k)
            sequential.record(k, n, base + per_position * k), parallel.record(k, n, base + per_position);
        auto rate = [&](const runtime::DraftCostModel& draft, int k) {
            double kept = 1.0, a = 1.0;
            for (int j = 0; j < k; ++j) kept += (a *= conf[j]);
            return n * kept / (step.seconds(n * (1 + k)) + draft.seconds(k, n));
        };
        for (const auto* draft : {&sequential, &parallel}) {
            int k = runtime::plan_draft_length(conf, n, step, *draft);
            ASSERT_GE(k, 0);
            ASSERT_LE(k, static_cast<int>(conf.size()));
            for (int other = 0; other <= static_cast<int>(conf.size()); ++other)
                EXPECT_GE(rate(*draft, k), rate(*draft, other) * (1 - 1e-12)) << "trial " << trial << " K " << k;
        }
        int ks = runtime::plan_draft_length(conf, n, step, sequential), kp = runtime::plan_draft_length(conf, n, step, parallel);
        EXPECT_LE(ks, kp) << "trial " << trial;
        shorter += ks < kp;
    }
    EXPECT_GT(shorter, 30);  // the cost term matters in a good share of the cases
    runtime::StepCostModel unmeasured;
    runtime::DraftCostModel draft;
    draft.record(2, 4, 1.0);
    EXPECT_EQ(runtime::plan_draft_length({0.1, 0.1, 0.1}, 4, unmeasured, draft), 3);  // all until measured
}

// Early in a busy run only the prompts' large steps are measured. A decode step's cost must not
// be read off them as if verifying drafts were free (the largest draft length every time, which
// made confidence scheduling the slowest mode at 64 concurrent requests); proportional pricing
// drafts nothing until drafts are seen to pay.
TEST(DraftLengthPlanner, DraftsAreNotFreeBeforeDecodeStepsAreMeasured) {
    runtime::StepCostModel step;
    step.record(2048, 0.08), step.record(2048, 0.08);  // prefill chunks only
    runtime::DraftCostModel draft, flat_draft;
    for (int k = 0; k <= 4; ++k) draft.record(k, 56, 0.002 + 0.002 * k), flat_draft.record(k, 56, 0.002);
    EXPECT_DOUBLE_EQ(step.seconds(512), 0.02);
    EXPECT_EQ(runtime::plan_draft_length({0.8, 0.6, 0.5, 0.4}, 56, step, draft), 0);
    // A resting draft model costs nothing at length 0 (it does not even take the commits in).
    EXPECT_EQ(runtime::plan_draft_length({0.8, 0.6, 0.5, 0.4}, 56, step, flat_draft, true), 0);
    // Once decode steps show that verifying more tokens costs little (as on a GPU), drafts pay.
    for (int i = 0; i < 2; ++i) step.record(56, 0.005), step.record(280, 0.005);
    EXPECT_EQ(runtime::plan_draft_length({0.8, 0.6, 0.5, 0.4}, 56, step, flat_draft), 4);
    EXPECT_EQ(runtime::plan_draft_length({0.8, 0.6, 0.5, 0.4}, 56, step, draft), 2);
}

// --- the rejection rule of draft distributions ------------------------------------------------

// The token emitted at a position by drafting x ~ q there and verifying it, over many seeds: the
// histogram's chi-square against n * p (goodness of fit) and the share of drafts kept.
struct RuleRun {
    double chi_square = 0, kept = 0;
    int df = 0;
};

RuleRun run_rule(const std::vector<float>& target, const std::vector<float>& draft, const kernels::SampleRow& params,
                 const std::vector<double>& p, int n, bool broken_residual, bool keep_all) {
    std::vector<int64_t> counts(target.size(), 0);
    RuleRun out;
    for (int i = 0; i < n; ++i) {
        kernels::SampleRow row = params;
        row.seed = static_cast<uint64_t>(i) * 7919 + 13;
        kernels::SampleRow draft_row = row;
        draft_row.seed ^= runtime::kDraftSeedSalt;
        int32_t x = kernels::cpu::sample_row(draft, draft_row, {}, nullptr).token;
        std::span<const float> t(target), d(draft);
        runtime::DraftVerdict v = runtime::verify_draft_distribution({&t, 1}, {&d, 1}, {&x, 1}, {&row, 1}, {}, broken_residual);
        if (keep_all) v.kept = 1;
        out.kept += static_cast<double>(v.kept) / n;
        ++counts[v.kept == 1 ? x : v.token];
    }
    for (size_t y = 0; y < p.size(); ++y) {
        if (p[y] == 0) {
            out.chi_square += counts[y] > 0 ? 1e9 : 0.0;  // a token the target never emits
            continue;
        }
        double e = n * p[y];
        out.chi_square += (counts[y] - e) * (counts[y] - e) / e;
        ++out.df;
    }
    --out.df;
    return out;
}

TEST(RejectionRule, EmittedTokensFollowTheTargetWhateverTheDraft) {
    const uint32_t seed = random_seed();
    SCOPED_TRACE("DEEPINFER_TEST_SEED=" + std::to_string(seed));
    std::mt19937 rng(seed);
    std::normal_distribution<float> logit(0.0f, 1.5f);
    const int vocab = 12, n = 200000;
    std::vector<float> target(vocab), draft(vocab);
    kernels::SampleRow params{.temperature = 0.8f, .top_p = 0.97f, .position = 7};
    std::vector<double> p(vocab);
    double overlap = 0;
    int support = 0;
    // Redrawn until the test can tell the rule from its broken variants: several tokens survive
    // top-p and the draft differs enough from the target (a near-point-mass target, or a draft
    // equal to it, would pass any rule).
    while (support < 6 || overlap < 0.2 || overlap > 0.9) {
        for (auto& v : target) v = logit(rng);
        for (int y = 0; y < vocab; ++y) draft[y] = 0.5f * target[y] + logit(rng);  // related, not equal
        std::vector<uint64_t> w = kernels::cpu::kept_weights(target, params, {}, nullptr);
        std::vector<uint64_t> wq = kernels::cpu::kept_weights(draft, params, {}, nullptr);
        double total = std::accumulate(w.begin(), w.end(), 0.0), total_q = std::accumulate(wq.begin(), wq.end(), 0.0);
        overlap = 0, support = 0;
        for (int y = 0; y < vocab; ++y) {
            p[y] = static_cast<double>(w[y]) / total;
            overlap += std::min(p[y], static_cast<double>(wq[y]) / total_q);
            support += w[y] > 0;
        }
    }
    RuleRun good = run_rule(target, draft, params, p, n, false, false);
    double threshold = chi_square_quantile(good.df, 4.0);
    std::printf("rule: chi-square %.1f (%d df, threshold %.1f), kept %.4f, expected sum min(p, q) = %.4f\n", good.chi_square,
                good.df, threshold, good.kept, overlap);
    EXPECT_LE(good.chi_square, threshold);
    EXPECT_NEAR(good.kept, overlap, 5 * std::sqrt(overlap * (1 - overlap) / n) + 1e-9);  // the rule keeps sum min(p, q)
    RuleRun residual = run_rule(target, draft, params, p, n, true, false);
    RuleRun all = run_rule(target, draft, params, p, n, false, true);
    std::printf("broken: redrawing from p gives chi-square %.1f, keeping every draft %.1f\n", residual.chi_square, all.chi_square);
    EXPECT_GT(residual.chi_square, chi_square_quantile(residual.df, 4.0));
    EXPECT_GT(all.chi_square, chi_square_quantile(all.df, 4.0));
}

}  // namespace
}  // namespace deepinfer::test
