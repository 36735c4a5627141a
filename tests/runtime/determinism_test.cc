// Deterministic requests (--deterministic, GenerationRequest::deterministic): a few probe requests
// (greedy, seeded sampling, sampling without a seed; logprobs and top logprobs) get the same
// tokens and logprobs, bit for bit, when each runs alone on a fresh engine without a prefix cache
// and when they run among 1 to 64 random other requests arriving at random times, under other
// step budgets (so their prompts are cut into other chunks), with a cache small enough to force
// preemption, with prefix caching on (a short bounded replay) or off, and with speculative decoding. The same busy run with
// the probes not deterministic differs, which shows that the comparison can fail: a hit then
// replays too few positions to rebuild the window rings exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <fstream>
#include <numeric>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tests/runtime/cache_size_util.h"
#include "tests/runtime/prefix_cache_util.h"

namespace deepinfer::test {
namespace {

struct Probe {
    std::vector<int32_t> prompt;
    SamplingParams sampling;
};

// What a probe produced: its tokens, the chosen tokens' logprobs and the top logprobs, as bits.
struct Output {
    std::vector<int32_t> tokens;
    std::vector<uint32_t> logprobs;
    std::vector<std::pair<int32_t, uint32_t>> top;
    std::string error;
    bool operator==(const Output&) const = default;
};

Output collect(RequestStream& stream) {
    Output out;
    while (auto ev = stream.next()) {
        if (!ev->error.empty()) out.error = ev->error;
        for (const auto& s : ev->sequences) {
            out.tokens.insert(out.tokens.end(), s.tokens.begin(), s.tokens.end());
            for (const auto& lp : s.logprobs) out.logprobs.push_back(std::bit_cast<uint32_t>(lp.logprob));
            for (const auto& row : s.top_logprobs)
                for (const auto& lp : row) out.top.emplace_back(lp.token, std::bit_cast<uint32_t>(lp.logprob));
        }
    }
    return out;
}

int sliding_window_of(const CachedModel& m) {
    nlohmann::json c = nlohmann::json::parse(std::ifstream(m.dir + "/config.json"));
    if (c.contains("text_config")) c = c["text_config"];
    return c.at("sliding_window").get<int>();
}

// The random other requests of a busy run.
struct Others {
    int min_count = 1;
    int max_tokens = 8;          // each generates 1 to this many tokens
    int max_tail = 40;           // tokens of its own after the shared prefix (or alone)
    int max_pause_us = 3000;     // before each submission
    bool random_budget = true;   // else the config's step budget
};

class Determinism : public ::testing::TestWithParam<CachedModel> {
protected:
    void SetUp() override {
        seed_ = random_seed();
        rng_.seed(seed_);
        const CachedModel& m = GetParam();
        shared_prefix_ = random_tokens(m.prefix);
        // Probes share a long prefix with some of the others, so they take prefix-cache hits.
        for (int i = 0; i < 4; ++i) {
            Probe p{shared_prefix_, {}};
            std::vector<int32_t> tail = random_tokens(3 + static_cast<int>(rng_() % 20));
            p.prompt.insert(p.prompt.end(), tail.begin(), tail.end());
            p.sampling.max_tokens = m.max_tokens;
            p.sampling.ignore_eos = true;
            p.sampling.logprobs = i == 1 ? 3 : 0;
            if (i >= 2) p.sampling.temperature = i == 2 ? 1.0f : 0.8f;
            if (i == 2) p.sampling.seed = rng_();
            if (i == 3) p.sampling.top_p = 0.9f, p.sampling.presence_penalty = 0.5f;  // seeded by the engine
            probes_.push_back(std::move(p));
        }
    }

    std::string trace() const { return GetParam().name + " seed " + std::to_string(seed_); }

    std::vector<int32_t> random_tokens(int n) {
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (auto& x : t) x = static_cast<int32_t>(rng_() % GetParam().vocab);
        return t;
    }

    // The model's engine with a bounded replay of window + 1 positions after a hit (exact only
    // for deterministic requests, which replay CausalLm::exact_replay_tokens instead).
    EngineConfig config(bool prefix_cache, bool deterministic) const {
        EngineConfig c = GetParam().config(prefix_cache);
        c.model.swa_replay_tokens = sliding_window_of(GetParam()) + 1 + replay_extra_;
        c.cache.max_sequences = 16;
        if (!precision_.empty()) c.model.precision = precision_;
        c.model.quantize = quantize_;
        c.deterministic = deterministic;
        return c;
    }

    GenerationRequest request(const Probe& p, bool deterministic) const {
        GenerationRequest r;
        r.prompt_tokens = p.prompt;
        r.sampling = p.sampling;
        r.deterministic = deterministic;
        return r;
    }

    // Each probe alone on a fresh engine without a prefix cache.
    std::vector<Output> alone() const {
        std::vector<Output> out;
        for (const Probe& p : probes_) {
            auto e = Engine::create(config(false, true));
            out.push_back(collect(*e->submit(request(p, false))));
            EXPECT_TRUE(out.back().error.empty()) << out.back().error;
        }
        return out;
    }

    // The probes among random other requests on `c`: first one that caches the shared prefix,
    // then the others and the probes in a random order, a random pause before each.
    std::vector<Output> busy(EngineConfig c, bool deterministic_probes, int max_others, EngineStats* stats = nullptr,
                             Others o = {}) {
        static constexpr int kBudgets[] = {7, 32, 96, 512};
        if (o.random_budget) c.scheduler.max_batch_tokens = kBudgets[rng_() % std::size(kBudgets)];
        c.scheduler.max_prefill_chunk = 0;
        auto e = Engine::create(c);
        collect(*e->submit(request({shared_prefix_, probes_[0].sampling}, false)));
        int others = o.min_count + static_cast<int>(rng_() % static_cast<uint32_t>(max_others - o.min_count + 1));
        std::vector<int> order(probes_.size() + static_cast<size_t>(others));
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng_);
        std::vector<std::shared_ptr<RequestStream>> probe_streams(probes_.size()), other_streams;
        for (int k : order) {
            if (o.max_pause_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(rng_() % static_cast<uint32_t>(o.max_pause_us)));
            if (k < static_cast<int>(probes_.size())) {
                probe_streams[static_cast<size_t>(k)] = e->submit(request(probes_[static_cast<size_t>(k)], deterministic_probes));
                continue;
            }
            GenerationRequest r;  // a random prompt, or the shared prefix with a random tail
            r.prompt_tokens = rng_() % 2 ? shared_prefix_ : std::vector<int32_t>{};
            std::vector<int32_t> tail = random_tokens(1 + static_cast<int>(rng_() % static_cast<uint32_t>(o.max_tail)));
            r.prompt_tokens.insert(r.prompt_tokens.end(), tail.begin(), tail.end());
            r.sampling.max_tokens = 1 + static_cast<int>(rng_() % static_cast<uint32_t>(o.max_tokens));
            r.sampling.temperature = rng_() % 2 ? 0.0f : 1.0f;
            r.sampling.ignore_eos = true;
            other_streams.push_back(e->submit(std::move(r)));
        }
        std::vector<Output> out;
        for (auto& s : probe_streams) out.push_back(collect(*s));
        for (auto& s : other_streams) {
            std::string error = collect(*s).error;
            EXPECT_TRUE(error.empty()) << error;
        }
        if (stats) *stats = e->stats();
        return out;
    }

    void expect_same(const std::vector<Output>& got, const std::vector<Output>& want) const {
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_TRUE(got[i].error.empty()) << got[i].error;
            EXPECT_EQ(got[i].tokens, want[i].tokens) << "probe " << i;
            EXPECT_EQ(got[i].logprobs, want[i].logprobs) << "probe " << i;
            EXPECT_EQ(got[i].top, want[i].top) << "probe " << i;
        }
    }

    int max_others() const { return GetParam().name == "nano" ? 16 : 64; }

    std::string precision_, quantize_;  // the engine's numerics (default: the fixture config's, exact)
    int replay_extra_ = 0;              // replayed positions beyond window + 1 (room for a rollback)
    uint32_t seed_ = 0;
    std::mt19937 rng_;
    std::vector<int32_t> shared_prefix_;
    std::vector<Probe> probes_;
};

TEST_P(Determinism, ABusyEngineWithPrefixCachingGivesEachProbeItsBitsAlone) {
    SCOPED_TRACE(trace());
    auto reference = alone();
    EngineStats stats;
    expect_same(busy(config(true, true), true, max_others(), &stats), reference);
    EXPECT_GT(stats.prefix_cache.hit_tokens, 0);
}

TEST_P(Determinism, ABusyEngineWithoutPrefixCachingGivesEachProbeItsBitsAlone) {
    SCOPED_TRACE(trace());
    auto reference = alone();
    expect_same(busy(config(false, true), true, max_others()), reference);
}

// The fast numerics are batch-invariant too: bf16 activations and cache, 8-bit weights with 8-bit
// activations quantized per row (MXFP4 experts decoded the same way for any number of rows).
TEST_P(Determinism, FastPrecisionAndQ8WeightsKeepEachProbesBits) {
    SCOPED_TRACE(trace());
    for (auto [precision, quantize] : {std::pair{"fast", ""}, std::pair{"fast", "q8"}}) {
        if (std::string(quantize) == "q8" && device() != "cpu") continue;  // q8 weights are CPU-only
        SCOPED_TRACE(std::string(precision) + " " + quantize);
        precision_ = precision, quantize_ = quantize;
        auto reference = alone();
        expect_same(busy(config(true, true), true, max_others()), reference);
    }
}

// The cache holds about one and a half of the longest sequences while up to eight run, all
// arriving at once with long outputs: sequences are preempted and recomputed, through the prefix
// cache where their spans are still there.
TEST_P(Determinism, PreemptionUnderASmallCacheKeepsEachProbesBits) {
    SCOPED_TRACE(trace());
    constexpr int kOutput = 40;  // long outputs: running sequences keep needing blocks
    for (Probe& p : probes_) p.sampling.max_tokens = kOutput;
    auto reference = alone();
    EngineConfig c = config(true, true);
    int tail = GetParam().prefix;  // the others' own tokens: as many as the shared prefix's
    int64_t longest = static_cast<int64_t>(shared_prefix_.size()) + tail + kOutput;
    c.cache.max_sequences = 8;
    c.cache.memory_bytes = smallest_cache_for(c, longest + longest / 2);
    EngineStats stats;
    c.scheduler.max_batch_tokens = 512;  // all at once: many sequences admitted, then growing
    expect_same(busy(c, true, max_others(), &stats, {.min_count = 12, .max_tokens = kOutput, .max_tail = tail,
                                                      .max_pause_us = 0, .random_budget = false}),
                reference);
    EXPECT_GT(stats.preemptions, 0);
}

// Speculative decoding (n-gram drafts of a fixed length, K spare rows) in the busy engine: each
// probe still gets its bits alone (drafts or not, a position's logits and draw are the same).
TEST_P(Determinism, SpeculativeDecodingKeepsEachProbesBits) {
    SCOPED_TRACE(trace());
    for (Probe& p : probes_) p.sampling.max_tokens = 24;  // long enough to verify drafts
    replay_extra_ = 8;  // V4.1's bounded replay covers the window plus the rollback (alone too: it sets what prefill sees)
    auto reference = alone();
    EngineConfig c = config(true, true);
    c.speculative.method = "ngram";
    c.speculative.num_draft_tokens = 1 + static_cast<int>(rng_() % 8);
    SCOPED_TRACE("draft length " + std::to_string(c.speculative.num_draft_tokens));
    EngineStats stats;
    expect_same(busy(c, true, max_others(), &stats), reference);
    EXPECT_GT(stats.speculative.verifications, 0);
}

// The per-request field alone (the engine not deterministic) gives the same bits where the
// kernels are always batch-invariant (CPU); CUDA needs the engine's mode (DeterminismOptions).
TEST_P(Determinism, TheRequestFieldAloneIsEnough) {
    if (device() != "cpu") GTEST_SKIP() << "on " << device() << " the engine runs --deterministic for such requests";
    SCOPED_TRACE(trace());
    auto reference = alone();
    expect_same(busy(config(true, false), true, max_others()), reference);
}

// The comparison can fail: the same busy run with probes that are not deterministic (each given
// a seed, so only the replay after a hit differs) changes some probe's bits.
TEST_P(Determinism, WithoutItAHitWithAShortReplayChangesTheBits) {
    SCOPED_TRACE(trace());
    for (Probe& p : probes_)
        if (!p.sampling.seed) p.sampling.seed = 7;
    auto reference = alone();
    EngineStats stats;
    auto got = busy(config(true, false), false, max_others(), &stats);
    EXPECT_GT(stats.prefix_cache.hit_tokens, 0);
    EXPECT_NE(got, reference);
}

// On CUDA the kernels themselves are what the mode fixes: without it (seeded probes, no prefix
// cache, so the replay plays no part) a busy run changes some probe's bits.
TEST_P(Determinism, WithoutTheModeCudaKernelsChangeTheBits) {
    if (device() == "cpu") GTEST_SKIP() << "the CPU kernels are batch-invariant in every mode";
    SCOPED_TRACE(trace());
    for (Probe& p : probes_)
        if (!p.sampling.seed) p.sampling.seed = 7;
    std::vector<Output> reference;
    for (const Probe& p : probes_) reference.push_back(collect(*Engine::create(config(false, false))->submit(request(p, false))));
    EXPECT_NE(busy(config(false, false), false, max_others()), reference);
}

// Where the default kernels are not batch-invariant (CUDA), a deterministic request needs an
// engine started in deterministic mode; elsewhere it is refused with the reason, never run as is.
TEST(DeterminismOptions, OnCudaARequestNeedsTheEnginesMode) {
    if (device() == "cpu") GTEST_SKIP() << "the CPU kernels are batch-invariant";
    CachedModel m = cached_models()[0];
    EngineConfig c = m.config(false);
    c.deterministic = true;
    EXPECT_TRUE(Engine::create(c)->deterministic_available());
    c.deterministic = false;
    auto e = Engine::create(c);
    EXPECT_FALSE(e->deterministic_available());
    GenerationRequest r;
    r.prompt_tokens = {1, 2, 3};
    r.deterministic = true;
    Output out = collect(*e->submit(std::move(r)));
    EXPECT_NE(out.error.find("--deterministic"), std::string::npos) << out.error;
    EXPECT_TRUE(out.tokens.empty());
}

TEST(DeterminismOptions, AnUnseededDeterministicRequestSamplesAlikeInEveryRun) {
    CachedModel m = cached_models()[0];
    GenerationRequest r;
    std::mt19937 rng(random_seed());
    for (int i = 0; i < 20; ++i) r.prompt_tokens.push_back(static_cast<int32_t>(rng() % m.vocab));
    r.sampling.temperature = 1.5f;
    r.sampling.max_tokens = 12;
    r.sampling.ignore_eos = true;
    auto run = [&](bool deterministic) {
        GenerationRequest q = r;
        q.deterministic = deterministic;
        EngineConfig c = m.config(false);
        c.deterministic = deterministic && device() != "cpu";  // CUDA: invariant kernels only in the engine's mode
        return collect(*Engine::create(c)->submit(std::move(q))).tokens;
    };
    EXPECT_EQ(run(true), run(true));
    EXPECT_NE(run(false), run(false));  // random seeds: 12 tokens at temperature 1.5 differ
}

INSTANTIATE_TEST_SUITE_P(Models, Determinism, ::testing::ValuesIn(cached_models()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace deepinfer::test
