// Speculative decoding in the engine: the output with drafts equals the output without them,
// token for token and logprob for logprob, for greedy and seeded sampled requests, requests with
// penalties among them (their rows after drafts sampled with the drafts in the history), under
// chunked prefill, prefix-cache hits and
// forced preemption; on the V4 and V4.1 fixtures and the bundled model. Steps verify drafts that
// are kept and drafts that are not (so the cache's rollback slack is exercised), and an engine
// that keeps drafts without checking them (a broken acceptance rule) changes the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>

#include "base/error.h"
#include "deepinfer/engine.h"
#include "runtime/speculative/drafter.h"
#include "tests/runtime/cache_size_util.h"
#include "tests/sampling_stats.h"
#include "tests/runtime/oracle_drafter.h"
#include "tests/runtime/test_models.h"

namespace deepinfer::test {
namespace {

// --- the engine ------------------------------------------------------------------------------

struct Model {
    std::string name, dir;
    int vocab = 0;
    int block_size = 4;
};

void PrintTo(const Model& m, std::ostream* os) { *os << m.name; }

std::vector<Model> models() {
    return {
        {"v4_tiny", make_model_dir("v4/v4_tiny_a", 1024), 1024, 4},
        {"v41_tiny", make_model_dir("v41/v41_tiny_a", 512), 512, 4},
        {"nano", data_path("../../models/deepinfer-nano"), 4096, 16},
    };
}

struct Output {
    std::vector<int32_t> tokens;
    std::vector<uint32_t> logprobs;  // bits
    std::vector<std::pair<int32_t, uint32_t>> top;
    bool operator==(const Output&) const = default;
};

struct Runs {
    std::vector<Output> outputs;  // per request and completion
    EngineStats stats;
};

EngineConfig engine_config(const Model& m) {
    EngineConfig c;
    c.model.path = m.dir;
    c.model.threads = 2;
    on_test_device(c.model);
    c.cache.block_size = m.block_size;
    c.deterministic = device() != "cpu";  // the same logits whatever the batch: CUDA needs the mode
    return c;
}

// Greedy continuations of `prompts` (no drafts).
std::vector<std::vector<int32_t>> continuations(const Model& m, const std::vector<std::vector<int32_t>>& prompts, int tokens) {
    auto engine = Engine::create(engine_config(m));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& p : prompts) {
        GenerationRequest r;
        r.prompt_tokens = p;
        r.sampling.temperature = 0;
        r.sampling.max_tokens = tokens;
        r.sampling.ignore_eos = true;
        streams.push_back(engine->submit(std::move(r)));
    }
    std::vector<std::vector<int32_t>> out;
    for (auto& st : streams) {
        auto& mine = out.emplace_back();
        while (auto ev = st->next())
            for (const auto& sq : ev->sequences) mine.insert(mine.end(), sq.tokens.begin(), sq.tokens.end());
    }
    return out;
}

// Requests of every kind whose prompts repeat themselves: a random start P (with a motif repeated
// in it), P's own greedy continuation C, then P's tail again, so that the model tends to say C
// again and the n-gram drafter proposes it: drafts are kept and rejected at every position.
std::vector<GenerationRequest> requests(const Model& m, uint64_t seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    auto random_tokens = [&](int n) {
        std::vector<int32_t> t(n);
        for (auto& x : t) x = static_cast<int32_t>(rng() % m.vocab);
        return t;
    };
    std::vector<std::vector<int32_t>> starts;
    std::vector<int32_t> shared = random_tokens(40);  // a system prompt several requests share
    for (int i = 0; i < 8; ++i) {
        std::vector<int32_t> motif = random_tokens(3 + static_cast<int>(rng() % 8)), prompt;
        if (i % 2 == 0) prompt = shared;
        for (int k = 0; k < 3; ++k) {
            prompt.insert(prompt.end(), motif.begin(), motif.end());
            std::vector<int32_t> noise = random_tokens(static_cast<int>(rng() % 4));
            prompt.insert(prompt.end(), noise.begin(), noise.end());
        }
        starts.push_back(std::move(prompt));
    }
    std::vector<std::vector<int32_t>> said = continuations(m, starts, 24);
    std::vector<GenerationRequest> out;
    for (int i = 0; i < 8; ++i) {
        GenerationRequest r;
        r.prompt_tokens = starts[i];
        r.prompt_tokens.insert(r.prompt_tokens.end(), said[i].begin(), said[i].end());
        size_t tail = std::min<size_t>(12, starts[i].size());
        r.prompt_tokens.insert(r.prompt_tokens.end(), starts[i].end() - static_cast<std::ptrdiff_t>(tail), starts[i].end());
        r.sampling.max_tokens = 24 + static_cast<int>(rng() % 24);
        r.sampling.ignore_eos = true;
        r.sampling.seed = rng();
        r.sampling.logprobs = i % 3;
        switch (i % 4) {
        case 0: r.sampling.temperature = 0; break;
        case 1: r.sampling.temperature = 0.7f, r.sampling.top_p = 0.9f; break;
        case 2: r.sampling.temperature = 1.0f, r.sampling.n = 2, r.sampling.top_k = 20; break;
        case 3:  // penalties: the rows after drafts are sampled with the drafts in their history
            r.sampling.repetition_penalty = 1.3f, r.sampling.presence_penalty = 0.5f;
            if (i == 7) r.sampling.temperature = 0.8f, r.sampling.frequency_penalty = 0.4f;
            else r.sampling.temperature = 0;
            break;
        }
        out.push_back(std::move(r));
    }
    return out;
}

struct Setup {
    bool speculative = true;
    std::string method = "ngram";
    std::shared_ptr<const runtime::Drafter> drafter;  // null: the n-gram drafter
    int draft = 4;
    std::string verify = "fixed";  // every draft found (the oracle's are all worth it)
    int max_batch_tokens = 64;
    bool prefix_cache = true;
    int64_t cache_bytes = 64 << 20;
    bool unchecked = false;
    std::vector<int> draft_lengths;  // a draft model's, in turn (-1: it rests)
};

Runs run(const Model& m, const Setup& s, uint64_t seed) {
    EngineConfig c = engine_config(m);
    c.cache.memory_bytes = s.cache_bytes;
    c.cache.max_sequences = 6;
    c.cache.prefix.enabled = s.prefix_cache;
    c.scheduler.max_batch_tokens = s.max_batch_tokens;
    if (s.speculative) c.speculative.method = s.method;
    c.speculative.drafter = s.drafter;
    c.speculative.num_draft_tokens = s.draft;
    c.speculative.verify = s.verify;
    c.speculative.test_accept_unchecked = s.unchecked;
    c.speculative.test_draft_lengths = s.draft_lengths;
    auto engine = Engine::create(c);
    std::vector<std::shared_ptr<RequestStream>> streams;
    std::vector<int> n;
    for (auto& r : requests(m, seed)) {
        n.push_back(r.sampling.n);
        streams.push_back(engine->submit(std::move(r)));
    }
    Runs out;
    for (size_t i = 0; i < streams.size(); ++i) {
        std::vector<Output> mine(n[i]);
        while (auto ev = streams[i]->next()) {
            EXPECT_TRUE(ev->error.empty()) << ev->error;
            for (const auto& sq : ev->sequences) {
                Output& o = mine.at(sq.index);
                o.tokens.insert(o.tokens.end(), sq.tokens.begin(), sq.tokens.end());
                for (const auto& lp : sq.logprobs) o.logprobs.push_back(std::bit_cast<uint32_t>(lp.logprob));
                for (const auto& row : sq.top_logprobs)
                    for (const auto& lp : row) o.top.emplace_back(lp.token, std::bit_cast<uint32_t>(lp.logprob));
            }
        }
        out.outputs.insert(out.outputs.end(), mine.begin(), mine.end());
    }
    engine->shutdown(false);
    out.stats = engine->stats();
    return out;
}

uint64_t test_seed() {
    static const uint64_t seed = [] {
        uint64_t s = std::random_device{}();
        if (const char* env = std::getenv("DEEPINFER_TEST_SEED")) s = std::strtoull(env, nullptr, 10);
        std::printf("DEEPINFER_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
        return s;
    }();
    return seed;
}

class Speculative : public ::testing::TestWithParam<Model> {};

// The oracle of a run without drafts of the requests of `seed`.
std::shared_ptr<const runtime::Drafter> oracle(const Model& m, const Runs& plain, uint64_t seed) {
    std::vector<std::vector<int32_t>> sequences;
    for (const auto& r : requests(m, seed))
        for (int j = 0; j < r.sampling.n; ++j) {
            std::vector<int32_t> f = r.prompt_tokens;
            const auto& out = plain.outputs.at(sequences.size()).tokens;
            f.insert(f.end(), out.begin(), out.end());
            sequences.push_back(std::move(f));
        }
    return std::make_shared<OracleDrafter>(std::move(sequences), m.vocab);
}

void expect_same(const Runs& got, const Runs& want) {
    ASSERT_EQ(got.outputs.size(), want.outputs.size());
    for (size_t i = 0; i < got.outputs.size(); ++i) {
        EXPECT_EQ(got.outputs[i].tokens, want.outputs[i].tokens) << "completion " << i;
        EXPECT_EQ(got.outputs[i].logprobs, want.outputs[i].logprobs) << "completion " << i;
        EXPECT_EQ(got.outputs[i].top, want.outputs[i].top) << "completion " << i;
    }
}

// Drafts were verified, some kept and some not (the rollback ran).
void expect_drafts_kept_and_rejected(const SpeculativeStats& s) {
    std::printf("%lld verifications, %lld of %lld drafts kept\n", static_cast<long long>(s.verifications),
                static_cast<long long>(s.accepted_tokens), static_cast<long long>(s.draft_tokens));
    EXPECT_GT(s.verifications, 0);
    EXPECT_GT(s.accepted_tokens, 0);
    EXPECT_LT(s.accepted_tokens, s.draft_tokens);
    ASSERT_FALSE(s.accepted_at.empty());
    for (size_t i = 0; i < s.accepted_at.size(); ++i) EXPECT_LE(s.accepted_at[i], s.proposed_at[i]);
    for (size_t i = 1; i < s.accepted_at.size(); ++i) EXPECT_LE(s.accepted_at[i], s.accepted_at[i - 1]);
}

TEST_P(Speculative, OutputEqualsDecodingWithoutDrafts) {
    const Model& m = GetParam();
    Runs want = run(m, {.speculative = false}, test_seed());
    EXPECT_EQ(want.stats.speculative.verifications, 0);
    auto drafter = oracle(m, want, test_seed());
    for (auto [draft, verify] : {std::pair{1, "fixed"}, {4, "fixed"}, {7, "fixed"}, {4, "confidence"}, {7, "confidence"}}) {
        SCOPED_TRACE("draft length " + std::to_string(draft) + ", " + verify + " verification");
        Runs got = run(m, {.drafter = drafter, .draft = draft, .verify = verify}, test_seed());
        expect_same(got, want);
        expect_drafts_kept_and_rejected(got.stats.speculative);
        EXPECT_EQ(got.stats.generated_tokens, want.stats.generated_tokens);  // delivered tokens only
    }
}

TEST_P(Speculative, NgramDraftsKeepTheOutput) {
    const Model& m = GetParam();
    Runs want = run(m, {.speculative = false}, test_seed() + 3);
    Runs got = run(m, {.verify = "confidence"}, test_seed() + 3);
    expect_same(got, want);
    const SpeculativeStats& s = got.stats.speculative;
    EXPECT_GT(s.verifications, 0);
    EXPECT_LT(s.accepted_tokens, s.draft_tokens);
    if (m.name == "nano") {
        EXPECT_GT(s.accepted_tokens, 0);  // trained: it repeats its prompt; random fixtures rarely do
    }
    std::printf("%s, n-gram drafts: %lld verifications, %lld of %lld drafts kept\n", m.name.c_str(),
                static_cast<long long>(s.verifications), static_cast<long long>(s.accepted_tokens),
                static_cast<long long>(s.draft_tokens));
}

TEST_P(Speculative, OutputEqualsUnderSmallStepsWithoutPrefixCacheAndUnderPreemption) {
    const Model& m = GetParam();
    Runs want = run(m, {.speculative = false}, test_seed() + 1);
    auto drafter = oracle(m, want, test_seed() + 1);
    {
        SCOPED_TRACE("small steps, no prefix cache");
        Runs got = run(m, {.drafter = drafter, .max_batch_tokens = 7, .prefix_cache = false}, test_seed() + 1);
        expect_same(got, want);
        expect_drafts_kept_and_rejected(got.stats.speculative);
    }
    // The least cache in which one sequence holds the longest request (~200 positions): six
    // resident sequences do not fit, so they preempt one another and are recomputed.
    EngineConfig sizing = engine_config(m);
    sizing.cache.max_sequences = 6;
    sizing.speculative.method = "ngram";  // Setup's draft length (4): the spare rows it adds
    const int64_t tight = smallest_cache_for(sizing, 210);
    SCOPED_TRACE("preemption");
    Runs got = run(m, {.drafter = drafter, .cache_bytes = tight}, test_seed() + 1);
    expect_same(got, want);
    EXPECT_GT(got.stats.preemptions, 0);
    expect_drafts_kept_and_rejected(got.stats.speculative);
}

TEST_P(Speculative, KeepingDraftsWithoutCheckingThemChangesTheOutput) {
    const Model& m = GetParam();
    Runs want = run(m, {.speculative = false}, test_seed() + 2);
    Runs broken = run(m, {.drafter = oracle(m, want, test_seed() + 2), .unchecked = true}, test_seed() + 2);
    EXPECT_GT(broken.stats.speculative.verifications, 0);
    bool differs = false;
    for (size_t i = 0; i < want.outputs.size(); ++i) differs = differs || broken.outputs[i].tokens != want.outputs[i].tokens;
    EXPECT_TRUE(differs);
}

// Per completion of requests(m, seed): whether it is greedy (temperature 0).
std::vector<bool> greedy_completions(const Model& m, uint64_t seed) {
    std::vector<bool> out;
    for (const auto& r : requests(m, seed))
        for (int j = 0; j < r.sampling.n; ++j) out.push_back(r.sampling.temperature <= 0);
    return out;
}

// A draft model's drafts (--speculative `method`), run by the engine after every step: greedy
// completions are the ones without drafts under each verify mode, small steps without the prefix
// cache (contexts written chunk by chunk) and preemption (contexts rebuilt); sampled ones keep
// their length (their distribution: SpeculativeDistribution). Returns the runs' statistics.
std::vector<SpeculativeStats> expect_greedy_output_kept(const Model& m, const std::string& method, uint64_t seed) {
    Runs want = run(m, {.speculative = false}, seed);
    EngineConfig sizing = engine_config(m);
    sizing.cache.max_sequences = 6;
    sizing.speculative.method = method;
    const int64_t tight = smallest_cache_for(sizing, 210);
    std::vector<bool> greedy = greedy_completions(m, seed);
    struct Case { const char* name; test::Setup setup; };
    std::vector<SpeculativeStats> stats;
    for (const Case& k : {Case{"fixed", {.method = method}}, Case{"confidence", {.method = method, .verify = "confidence"}},
                          Case{"small steps", {.method = method, .max_batch_tokens = 7, .prefix_cache = false}},
                          Case{"preemption", {.method = method, .cache_bytes = tight}},
                          // Resting (-1) skips the draft model's commits: each sequence's draft context
                          // restarts when drafting resumes. Length 0 only takes the commits in.
                          Case{"resting", {.method = method, .draft_lengths = {3, -1, 0, 2, -1, -1, 1, 4}}}}) {
        SCOPED_TRACE(k.name);
        Runs got = run(m, k.setup, seed);
        EXPECT_EQ(got.outputs.size(), greedy.size());
        for (size_t i = 0; i < greedy.size() && i < got.outputs.size(); ++i) {
            EXPECT_EQ(got.outputs[i].tokens.size(), want.outputs[i].tokens.size()) << "completion " << i;
            if (greedy[i]) {
                EXPECT_EQ(got.outputs[i], want.outputs[i]) << "greedy completion " << i;
            }
        }
        if (std::string(k.name) == "preemption") {
            EXPECT_GT(got.stats.preemptions, 0);
        }
        const SpeculativeStats& st = stats.emplace_back(got.stats.speculative);
        EXPECT_GT(st.verifications, 0);
        std::printf("%s, %s: %lld verifications, %lld of %lld drafts kept\n", method.c_str(), k.name,
                    static_cast<long long>(st.verifications), static_cast<long long>(st.accepted_tokens),
                    static_cast<long long>(st.draft_tokens));
    }
    Runs broken = run(m, {.method = method, .unchecked = true}, seed);
    bool differs = false;
    for (size_t i = 0; i < want.outputs.size(); ++i)
        differs = differs || (greedy[i] && broken.outputs[i].tokens != want.outputs[i].tokens);
    EXPECT_TRUE(differs) << "keeping " << method << " drafts unchecked left the output as it was";
    return stats;
}

// DSpark on the v41_dspark fixture: random weights draft badly, so few drafts are kept, but every
// one is verified.
TEST(SpeculativeDSpark, GreedyOutputEqualsDecodingWithoutDrafts) {
    Model m{"v41_dspark", make_model_dir("v41/v41_dspark", 320), 320, 4};
    for (const SpeculativeStats& st : expect_greedy_output_kept(m, "dspark", test_seed() + 5)) EXPECT_GT(st.draft_tokens, 0);
}

// MTP drafts from the bundled model's trained head (mtp.0): kept and rejected at every position.
TEST(SpeculativeMtp, GreedyOutputEqualsDecodingWithoutDrafts) {
    Model m = models().back();
    ASSERT_EQ(m.name, "nano");
    for (const SpeculativeStats& st : expect_greedy_output_kept(m, "mtp", test_seed() + 6)) expect_drafts_kept_and_rejected(st);
}

// A draft model the checkpoint lacks is refused at start-up, naming what is missing: no draft at
// all (v41_tiny_a), an MTP head where DSpark is asked (nano), a DSpark draft where MTP is.
TEST(SpeculativeConfig, EachDraftModelNeedsItsCheckpoint) {
    auto refused = [](const std::string& path, const std::string& method, const std::string& message) {
        EngineConfig c;
        c.model.threads = 1;
        c.model.path = path;
        c.speculative.method = method;
        try {
            Engine::create(c);
            ADD_FAILURE() << path << " started with --speculative " << method;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
        }
    };
    refused(make_model_dir("v41/v41_tiny_a", 512), "dspark", "no DSpark draft model");
    refused(data_path("../../models/deepinfer-nano"), "dspark", "no DSpark draft model");
    refused(make_model_dir("v41/v41_dspark", 320), "mtp", "no MTP head");
}

// The sampled output's distribution with drafts is the target's: many requests of one prompt at
// temperature 0.7 on a 256-token fixture, drafts on and off with independent seeds; the tokens at
// each of the first 40 generated positions (10^5 draws in all) pass a chi-square test of
// homogeneity at 0.1% overall (0.0025% per position), and fail it when drafts are kept unchecked
// (a bin counts the tokens that equal the drafter's proposal).
class SpeculativeDistribution : public ::testing::Test {
protected:
    static constexpr int kRequests = 2500, kPositions = 40;

    static Model fp8_model() { return {"v41_fp8", make_model_dir("v41/v41_release_fp8", 256), 256, 4}; }
    static Model dspark_model() { return {"v41_dspark", make_model_dir("v41/v41_dspark", 320), 320, 4}; }

    // counts[k][token]: how often `token` was generated at position k; `method` "" decodes without drafts.
    std::vector<std::vector<int64_t>> sample(const Model& m, const std::string& method, bool unchecked, uint64_t seed_base) {
        bool speculative = !method.empty();
        EngineConfig c = engine_config(m);
        c.cache.max_sequences = 64;
        c.cache.memory_bytes = 64 << 20;
        c.scheduler.max_running = 64;
        c.model.swa_replay_tokens = 24;  // a prefix hit replays little (the same in both modes)
        if (speculative) c.speculative.method = method, c.speculative.verify = "fixed";
        c.speculative.test_accept_unchecked = unchecked;
        auto engine = Engine::create(c);
        std::mt19937 rng(99);
        std::vector<int32_t> prompt(m.vocab);  // every token once: the drafter always proposes
        std::iota(prompt.begin(), prompt.end(), 0);
        std::shuffle(prompt.begin(), prompt.end(), rng);
        std::vector<std::shared_ptr<RequestStream>> streams;
        for (int i = 0; i < kRequests; ++i) {
            GenerationRequest r;
            r.prompt_tokens = prompt;
            r.sampling.temperature = 0.7f;
            r.sampling.max_tokens = kPositions;
            r.sampling.ignore_eos = true;
            r.sampling.seed = seed_base + static_cast<uint64_t>(i);
            streams.push_back(engine->submit(std::move(r)));
        }
        // Bins: the token, or (bin `vocab`) "the token the n-gram drafter proposed there", so that
        // drafts taken without their check show.
        std::vector<std::vector<int64_t>> counts(kPositions, std::vector<int64_t>(m.vocab + 1, 0));
        runtime::NgramDrafter drafter(c.speculative.ngram_min, c.speculative.ngram_max);
        for (auto& st : streams) {
            std::vector<int32_t> tokens = prompt;
            while (auto ev = st->next())
                for (const auto& sq : ev->sequences) tokens.insert(tokens.end(), sq.tokens.begin(), sq.tokens.end());
            EXPECT_EQ(tokens.size(), prompt.size() + kPositions);
            for (size_t k = 0; k < kPositions && prompt.size() + k < tokens.size(); ++k) {
                size_t at = prompt.size() + k;
                std::vector<int32_t> draft = drafter.propose(std::span<const int32_t>(tokens.data(), at), 1);
                ++counts[k][!draft.empty() && draft[0] == tokens[at] ? m.vocab : tokens[at]];
            }
        }
        engine->shutdown(false);
        if (speculative) {
            EXPECT_GT(engine->stats().speculative.verifications, kRequests / 10);
        }
        return counts;
    }

    // The chi-square statistic of homogeneity of two histograms of equal totals, and its degrees
    // of freedom; tokens expected fewer than 5 times are pooled into one bin.
    static std::pair<double, int> chi_square(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
        double stat = 0, pooled_a = 0, pooled_b = 0;
        int bins = 0;
        auto add = [&](double x, double y) {
            double e = (x + y) / 2;
            stat += (x - e) * (x - e) / e + (y - e) * (y - e) / e;
            ++bins;
        };
        for (size_t t = 0; t < a.size(); ++t) {
            if ((a[t] + b[t]) / 2.0 < 5) pooled_a += static_cast<double>(a[t]), pooled_b += static_cast<double>(b[t]);
            else add(static_cast<double>(a[t]), static_cast<double>(b[t]));
        }
        if (pooled_a + pooled_b > 0) add(pooled_a, pooled_b);
        return {stat, bins - 1};
    }

    // Whether every position passes at 0.0025% (z = 4.06).
    static bool same_distribution(const std::vector<std::vector<int64_t>>& x, const std::vector<std::vector<int64_t>>& y) {
        bool same = true;
        for (int k = 0; k < kPositions; ++k) {
            auto [stat, df] = chi_square(x[k], y[k]);
            std::printf("position %d: chi-square %.1f, %d degrees of freedom, threshold %.1f\n", k, stat, df, chi_square_quantile(df, 4.06));
            same = same && stat <= chi_square_quantile(df, 4.06);
        }
        return same;
    }
};

TEST_F(SpeculativeDistribution, SampledTokensFollowTheTargetsDistribution) {
    Model m = fp8_model();
    auto plain = sample(m, "", false, 1u << 30);
    EXPECT_TRUE(same_distribution(sample(m, "ngram", false, 1), plain));
    EXPECT_FALSE(same_distribution(sample(m, "ngram", true, 1), plain));  // a broken acceptance rule is seen
}

// DSpark's sampled drafts come with their distribution and are verified by the rejection rule.
TEST_F(SpeculativeDistribution, DSparkDraftsKeepTheTargetsDistribution) {
    Model m = dspark_model();
    auto plain = sample(m, "", false, 1u << 30);
    EXPECT_TRUE(same_distribution(sample(m, "dspark", false, 1), plain));
    EXPECT_FALSE(same_distribution(sample(m, "dspark", true, 1), plain));
}

INSTANTIATE_TEST_SUITE_P(Models, Speculative, ::testing::ValuesIn(models()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace deepinfer::test
