// SWA bounded replay on DeepSeek-V4.1: decoder replay (late layers prefill only the prompt's
// tail) and encoder replay (window rings rebuilt from a tail after a compressed-only prefix hit),
// checked against a full forward. A window truncated at the tail start perturbs at most
// window - 1 later positions per layer it passes, so a tail of layers * (window - 1) + 1 tokens
// must reproduce the full forward exactly, and a tail of one window must not.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "base/error.h"
#include "deepinfer/engine.h"
#include "kernels/backend.h"
#include "model/archs/deepseek_v41.h"
#include "runtime/sequence_logits.h"
#include "tests/model/parity_util.h"
#include "tests/runtime/test_models.h"

namespace deepinfer {
namespace {

class V41Replay : public ::testing::Test {
protected:
    void SetUp() override {
        backend = kernels::make_cpu_backend(2);
        dir = test::data_path("v41/v41_tiny_a");
        m = std::make_unique<model::DeepseekV41Model>(dir, *backend);
        std::mt19937 rng(5);
        for (int i = 0; i < prompt + decode; ++i) tokens.push_back(static_cast<int32_t>(rng() % m->vocab_size()));
        full = runtime::sequence_logits(*m, tokens, {});
    }
    model::Batch step(int64_t begin, int64_t count) const {
        model::Batch b;
        b.append(tokens, begin, static_cast<int32_t>(count), state);
        b.logit_rows.push_back(static_cast<int32_t>(count) - 1);
        b.prompt_lengths.push_back(prompt);
        return b;
    }
    std::unique_ptr<model::HybridCache> fresh_cache() {
        auto c = std::make_unique<model::HybridCache>(m->cache_layout(), *backend, m->plan_cache_for_tokens(1, 512, 8));
        state = c->add_sequence();
        c->reserve(state, prompt + decode);
        return c;
    }
    // max |logits - full| over the prompt's last row and `decode` teacher-forced decode rows.
    double decode_error(model::HybridCache& cache, const Tensor& last_prompt_row) {
        int64_t vocab = full.dim(1);
        auto row_error = [&](const Tensor& got, int64_t row) {
            double e = 0.0;
            for (int64_t v = 0; v < vocab; ++v)
                e = std::max(e, std::fabs(static_cast<double>(got.data<float>()[v]) - full.data<float>()[row * vocab + v]));
            return e;
        };
        double err = row_error(last_prompt_row, prompt - 1);
        for (int i = 0; i < decode; ++i) err = std::max(err, row_error(m->forward(step(prompt + i, 1), cache), prompt + i));
        return err;
    }
    int late_layers() const { return 3; }  // layers 6..8 follow the last KV source (5)
    int window() const { return m->config().base.sliding_window; }

    std::unique_ptr<kernels::Backend> backend;
    std::string dir;
    std::unique_ptr<model::DeepseekV41Model> m;
    std::vector<int32_t> tokens;
    Tensor full;
    int prompt = 160, decode = 12, state = 0;
};

TEST_F(V41Replay, RefusesAReplayShorterThanWindowPlusRollback) {
    try {
        m->configure_swa_replay(window() + 4, 5);
        FAIL() << "accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(std::to_string(window() + 5)), std::string::npos) << e.what();
    }
    EXPECT_TRUE(m->configure_swa_replay(window() + 5, 5));
    EXPECT_TRUE(m->configure_swa_replay(0, 5));  // off
}

TEST_F(V41Replay, DecoderReplayIsExactBeyondTheReachOfTruncatedWindows) {
    int exact_k = late_layers() * (window() - 1) + 1;
    for (auto [k, exact] : {std::pair{exact_k, true}, std::pair{window(), false}}) {
        m->configure_swa_replay(k, 0);
        auto cache = fresh_cache();
        Tensor last = m->forward(step(0, prompt), *cache);
        double err = decode_error(*cache, last);
        if (exact) EXPECT_EQ(err, 0.0) << "K = " << k;
        else EXPECT_GT(err, 0.0) << "K = " << k << ": the replay changed nothing, so it did not run";
        EXPECT_TRUE(std::isfinite(err));
    }
}

TEST_F(V41Replay, DecoderReplayAcrossPrefillChunks) {
    int k = late_layers() * (window() - 1) + 1;
    m->configure_swa_replay(k, 0);
    auto cache = fresh_cache();
    Tensor last;
    for (int begin = 0; begin < prompt; begin += 37) {
        model::Batch b = step(begin, std::min(37, prompt - begin));
        if (begin + 37 < prompt) b.logit_rows.clear();  // only the prompt's last row samples
        last = m->forward(b, *cache);
    }
    EXPECT_EQ(decode_error(*cache, last), 0.0);
}

TEST_F(V41Replay, EncoderReplayRebuildsDroppedWindows) {
    int layers = m->config().base.num_hidden_layers;
    for (auto [k, exact] : {std::pair{layers * (window() - 1) + 1, true}, std::pair{window(), false}}) {
        auto cache = fresh_cache();
        Tensor last = m->forward(step(0, prompt), *cache);
        for (int l = 0; l < layers; ++l) {  // the prefix hit restored compressed state only
            Tensor ring = cache->layer(l).ring;
            std::fill_n(ring.data<float>(), ring.numel(), std::numeric_limits<float>::quiet_NaN());
        }
        m->rebuild_windows(step(prompt - k, k), *cache);
        double err = decode_error(*cache, last);
        EXPECT_TRUE(std::isfinite(err)) << "K = " << k << " read a ring slot it did not rebuild";
        if (exact) EXPECT_EQ(err, 0.0) << "K = " << k;
        else EXPECT_GT(err, 0.0) << "K = " << k;
    }
}

TEST(V41ReplayEngine, OptionIsCheckedAndGenerationMatchesWithoutReplay) {
    std::string dir = test::make_model_dir("v41/v41_tiny_a", 512);
    auto make = [&](int replay, int rollback) {
        EngineConfig c;
        c.model.path = dir;
        c.model.threads = 2;
        test::on_test_device(c.model);
        c.model.swa_replay_tokens = replay;
        c.model.rollback_tokens = rollback;
        c.cache.memory_bytes = 16 << 20;
        c.cache.max_sequences = 4;
        c.cache.block_size = 4;
        return Engine::create(c);
    };
    EXPECT_THROW(make(10, 3), Error);  // window 8 + rollback 3 > 10
    std::mt19937 rng(9);
    GenerationRequest r;
    for (int i = 0; i < 150; ++i) r.prompt_tokens.push_back(static_cast<int32_t>(rng() % 512));
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = 12;
    r.sampling.ignore_eos = true;
    auto generate = [&](int replay) {
        auto e = make(replay, 0);
        std::vector<int32_t> out;
        auto stream = e->submit(r);
        while (auto ev = stream->next())
            for (const auto& s : ev->sequences) out.insert(out.end(), s.tokens.begin(), s.tokens.end());
        return out;
    };
    std::vector<int32_t> without = generate(0);
    EXPECT_EQ(without.size(), 12u);
    EXPECT_EQ(generate(22), without);  // 3 late layers * 7 + 1: exact
}

// Encoder replay in the engine: a request whose prompt starts like a resident sequence's takes
// that sequence's compressed prefix and recomputes only the last K positions to refill its
// window rings. With K beyond the reach of truncated windows (9 layers * 7 + 1) the output must
// equal a run without sharing.
TEST(V41ReplayEngine, PrefixSharingReusesCompressedStateExactly) {
    std::string dir = test::make_model_dir("v41/v41_tiny_a", 512);
    auto make = [&](bool sharing) {
        EngineConfig c;
        c.model.path = dir;
        c.model.threads = 2;
        test::on_test_device(c.model);
        c.model.swa_replay_tokens = 64;
        c.cache.memory_bytes = 16 << 20;
        c.cache.max_sequences = 4;
        c.cache.block_size = 4;
        c.cache.prefix.enabled = sharing;
        return Engine::create(c);
    };
    std::mt19937 rng(13);
    std::vector<int32_t> prefix;
    for (int i = 0; i < 120; ++i) prefix.push_back(static_cast<int32_t>(rng() % 512));
    auto request = [&](int32_t suffix_seed, int max_tokens) {
        GenerationRequest r;
        r.prompt_tokens = prefix;
        for (int i = 0; i < 10; ++i) r.prompt_tokens.push_back((suffix_seed * 31 + i * 7) % 512);
        r.sampling.temperature = 0.0f;
        r.sampling.max_tokens = max_tokens;
        r.sampling.ignore_eos = true;
        return r;
    };
    auto drain = [](RequestStream& s) {
        std::vector<int32_t> out;
        while (auto ev = s.next())
            for (const auto& q : ev->sequences) out.insert(out.end(), q.tokens.begin(), q.tokens.end());
        return out;
    };
    std::vector<int32_t> expected = drain(*make(false)->submit(request(2, 16)));
    auto e = make(true);
    auto first = e->submit(request(1, 40));
    ASSERT_TRUE(first->next().has_value());  // its prompt is in the cache now
    std::vector<int32_t> shared = drain(*e->submit(request(2, 16)));
    drain(*first);
    EXPECT_EQ(e->stats().prefix_tokens_reused, 120 - 64);
    EXPECT_EQ(shared, expected);
}

}  // namespace
}  // namespace deepinfer
