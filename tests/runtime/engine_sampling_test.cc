// The engine's sampling, done by the backend where the logits are (Backend::sample_rows, with the
// penalty state on the device), against the host sampler replayed on the same model: a full
// forward of prompt + output on the same device gives every position's logits, and
// runtime::sample_token on each row, with the sequence's seed, the token's position and the
// history before it, must choose the engine's token; the logprobs agree. Every parameter and
// combinations of them, n > 1, in a cache small enough to preempt sequences in the middle of their
// output, whose penalty rows are then rewritten from their tokens (a rewrite that dropped the
// output counts fails here: checked by breaking it on purpose), with more sequences that need a
// penalty row than there are rows.
#include <gtest/gtest.h>

#include "deepinfer/engine.h"
#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "runtime/sampler.h"
#include "runtime/sequence_logits.h"
#include "tests/runtime/test_models.h"

namespace deepinfer {
namespace {

// Schedules differ in the last bits of the logits on CUDA (the kernels are not batch-invariant),
// which moves logprobs by ~1e-5; the tokens are compared exactly.
constexpr double kLogprobTolerance = 1e-3;

struct Generated {
    std::vector<std::vector<int32_t>> tokens;  // per sequence index
    std::vector<std::vector<TokenLogprob>> chosen;
    std::vector<std::vector<std::vector<TokenLogprob>>> top;
    std::string error;
};

Generated collect_all(RequestStream& stream, int n) {
    Generated g;
    g.tokens.resize(n), g.chosen.resize(n), g.top.resize(n);
    while (auto ev = stream.next()) {
        if (!ev->error.empty()) g.error = ev->error;
        for (const auto& s : ev->sequences) {
            g.tokens[s.index].insert(g.tokens[s.index].end(), s.tokens.begin(), s.tokens.end());
            g.chosen[s.index].insert(g.chosen[s.index].end(), s.logprobs.begin(), s.logprobs.end());
            g.top[s.index].insert(g.top[s.index].end(), s.top_logprobs.begin(), s.top_logprobs.end());
        }
    }
    return g;
}

// Parameter sets, each alone and in combinations; the bias and penalties are strong enough to
// change what is drawn on a 1,024-token vocabulary.
std::vector<SamplingParams> parameter_sets() {
    auto with = [](auto set) {
        SamplingParams p;
        set(p);
        return p;
    };
    return {
        with([](SamplingParams& p) { p.temperature = 0.8f, p.top_k = 40, p.top_p = 0.9f, p.repetition_penalty = 1.3f,
                                     p.presence_penalty = 0.5f, p.frequency_penalty = 0.4f, p.logprobs = 3, p.n = 2; }),
        with([](SamplingParams& p) { p.temperature = 1.2f, p.min_p = 0.05f, p.frequency_penalty = 1.5f,
                                     p.logit_bias = {{17, 4.0f}, {300, -100.0f}, {511, 2.0f}}; }),
        with([](SamplingParams& p) { p.temperature = 0.0f, p.repetition_penalty = 1.8f, p.logprobs = 0; }),
        with([](SamplingParams& p) { p.logprobs = 5, p.n = 3; }),
        with([](SamplingParams& p) { p.top_p = 0.5f, p.presence_penalty = -0.8f, p.logit_bias = {{42, 3.0f}}; }),
        with([](SamplingParams& p) { p.top_k = 1, p.frequency_penalty = 2.0f, p.logprobs = 2; }),
        with([](SamplingParams& p) { p.temperature = 0.6f, p.top_k = 8, p.min_p = 0.1f, p.repetition_penalty = 0.7f; }),
    };
}

void expect_host_replay_agrees(model::CausalLm& model, const GenerationRequest& r, const Generated& g, const std::string& what) {
    const SamplingParams& p = r.sampling;
    for (int i = 0; i < p.n; ++i) {
        const std::vector<int32_t>& out = g.tokens[i];
        ASSERT_EQ(out.size(), static_cast<size_t>(p.max_tokens)) << what << " sequence " << i << ": " << g.error;
        std::vector<int32_t> ids = r.prompt_tokens;
        ids.insert(ids.end(), out.begin(), out.end() - 1);
        Tensor logits = runtime::sequence_logits(model, ids, {});
        int64_t vocab = logits.dim(1), prompt_len = static_cast<int64_t>(r.prompt_tokens.size());
        for (size_t t = 0; t < out.size(); ++t) {
            std::span<const float> row(logits.data<float>() + (prompt_len - 1 + static_cast<int64_t>(t)) * vocab, vocab);
            runtime::SampleOutput host = runtime::sample_token(
                {row, &p, *p.seed + static_cast<uint64_t>(i), prompt_len + static_cast<int64_t>(t), r.prompt_tokens,
                 std::span<const int32_t>(out.data(), t)});
            std::string at = what + " sequence " + std::to_string(i) + " token " + std::to_string(t);
            ASSERT_EQ(out[t], host.token) << at;  // later tokens follow from this one
            if (p.logprobs < 0) continue;
            EXPECT_NEAR(g.chosen[i].at(t).logprob, host.logprob, kLogprobTolerance) << at;
            ASSERT_EQ(g.top[i].size(), p.logprobs > 0 ? out.size() : 0u) << at;
            for (int k = 0; k < p.logprobs; ++k) {
                EXPECT_EQ(g.top[i][t].at(k).token, host.top.at(k).token) << at << " top " << k;
                EXPECT_NEAR(g.top[i][t][k].logprob, host.top[k].logprob, kLogprobTolerance) << at << " top " << k;
            }
        }
    }
}

TEST(EngineSampling, DeviceTokensEqualTheHostSamplerReplay) {
    std::string dir = test::make_model_dir("v4/v4_tiny_a", 1024);
    EngineConfig c;
    c.model.path = dir;
    c.model.threads = 2;
    test::on_test_device(c.model);
    c.cache.memory_bytes = 200 << 10;  // a few sequences' entries: preemption and recompute
    c.cache.max_sequences = 4;         // also the penalty state's rows
    c.cache.block_size = 4;
    c.scheduler.max_batch_tokens = 48;
    auto engine = Engine::create(c);
    std::vector<GenerationRequest> requests;
    std::vector<std::shared_ptr<RequestStream>> streams;
    std::vector<SamplingParams> sets = parameter_sets();
    for (int k = 0; k < 2 * static_cast<int>(sets.size()); ++k) {  // each set twice: more sequences than rows
        GenerationRequest r;
        r.sampling = sets[k % sets.size()];
        r.sampling.max_tokens = 40;
        r.sampling.ignore_eos = true;
        r.sampling.seed = 1000 + 17 * k;
        for (int t = 0; t < 9 + 11 * (k % 7); ++t) r.prompt_tokens.push_back((37 * t + 101 * k + 5) % 1024);
        requests.push_back(r);
        streams.push_back(engine->submit(r));
    }
    std::vector<Generated> generated;
    for (size_t i = 0; i < streams.size(); ++i) generated.push_back(collect_all(*streams[i], requests[i].sampling.n));
    EXPECT_GT(engine->stats().preemptions, 0);
    engine.reset();
    auto backend = kernels::make_backend(test::device(), 2);
    auto model = model::load_causal_lm(dir, *backend, {.precision = model::Precision::kExact});
    for (size_t i = 0; i < requests.size(); ++i)
        expect_host_replay_agrees(*model, requests[i], generated[i], "request " + std::to_string(i));
}

}  // namespace
}  // namespace deepinfer
