// The engine end to end on the V4 fixtures: batched greedy generation equals each request alone
// and a full recompute; chunked prefill mixed with decode, preemption under a small cache,
// seeded sampling independent of the batch, stop conditions, n > 1, logprobs, cancellation and
// request errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "core/safetensors.h"
#include "deepinfer/engine.h"
#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "runtime/sequence_logits.h"
#include "tests/runtime/test_models.h"

namespace deepinfer {
namespace {

struct Result {
    std::vector<std::vector<int32_t>> tokens;  // per sequence index
    std::vector<std::string> text;
    std::vector<FinishReason> finish;
    std::vector<std::vector<TokenLogprob>> logprobs;
    std::string error;
    int completion_tokens = 0;
};

Result collect(RequestStream& stream, int n = 1) {
    Result r;
    r.tokens.resize(n);
    r.text.resize(n);
    r.finish.resize(n);
    r.logprobs.resize(n);
    while (auto ev = stream.next()) {
        if (!ev->error.empty()) r.error = ev->error;
        for (const auto& s : ev->sequences) {
            r.tokens[s.index].insert(r.tokens[s.index].end(), s.tokens.begin(), s.tokens.end());
            r.text[s.index] += s.text;
            r.logprobs[s.index].insert(r.logprobs[s.index].end(), s.logprobs.begin(), s.logprobs.end());
            if (s.finish != FinishReason::kNone) r.finish[s.index] = s.finish;
        }
        r.completion_tokens = ev->completion_tokens;
    }
    return r;
}

class EngineTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new std::string(test::make_model_dir("v4/v4_tiny_a", 1024));
        SafetensorsFile ref(*dir_ + "/reference.safetensors");
        Tensor ids = ref.tensor("input_ids");
        ids_ = new std::vector<int32_t>();
        for (int64_t i = 0; i < ids.numel(); ++i) ids_->push_back(static_cast<int32_t>(ids.data<int64_t>()[i]));
    }
    static std::unique_ptr<Engine> engine(int batch_tokens = 32, int64_t memory = 64 << 20, bool async = true, int seqs = 16) {
        EngineConfig c;
        c.model.path = *dir_;
        c.model.threads = 2;
        test::on_test_device(c.model);
        c.cache.memory_bytes = memory;
        c.cache.max_sequences = seqs;
        c.cache.block_size = 4;
        c.scheduler.max_batch_tokens = batch_tokens;
        c.scheduler.async_scheduling = async;
        return Engine::create(c);
    }
    static std::vector<int32_t> prompt(int begin, int len) {
        return std::vector<int32_t>(ids_->begin() + begin, ids_->begin() + begin + len);
    }
    static GenerationRequest greedy(std::vector<int32_t> p, int max_tokens) {
        GenerationRequest r;
        r.prompt_tokens = std::move(p);
        r.sampling.temperature = 0.0f;
        r.sampling.max_tokens = max_tokens;
        r.sampling.ignore_eos = true;
        return r;
    }
    static std::string* dir_;
    static std::vector<int32_t>* ids_;
};
std::string* EngineTest::dir_ = nullptr;
std::vector<int32_t>* EngineTest::ids_ = nullptr;

const std::vector<std::pair<int, int>> kPrompts = {{0, 5}, {10, 17}, {3, 40}, {50, 64}, {7, 100}, {90, 3}};

// Greedy continuations of kPrompts generated together (prompts prefilled in chunks between
// decode steps) equal each request alone and the argmax of a full recompute.
void expect_batched_greedy_consistent(const std::string& dir, const std::vector<int32_t>& ids,
                                      const std::vector<std::pair<int, int>>& prompts,
                                      const std::function<std::unique_ptr<Engine>(int, bool)>& engine) {
    auto prompt = [&](int b, int n) { return std::vector<int32_t>(ids.begin() + b, ids.begin() + b + n); };
    auto greedy = [](std::vector<int32_t> p) {
        GenerationRequest r;
        r.prompt_tokens = std::move(p);
        r.sampling.temperature = 0.0f;
        r.sampling.max_tokens = 20;
        r.sampling.ignore_eos = true;
        return r;
    };
    std::vector<std::vector<int32_t>> alone;
    {
        auto e = engine(512, false);
        for (auto [b, n] : prompts) alone.push_back(collect(*e->submit(greedy(prompt(b, n)))).tokens[0]);
    }
    auto e = engine(32, true);  // small budget: prompts prefill in chunks between decode steps
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (auto [b, n] : prompts) streams.push_back(e->submit(greedy(prompt(b, n))));
    for (size_t i = 0; i < streams.size(); ++i) {
        Result r = collect(*streams[i]);
        EXPECT_EQ(r.tokens[0], alone[i]) << "request " << i;
        EXPECT_EQ(r.finish[0], FinishReason::kLength);
        EXPECT_EQ(r.completion_tokens, 20);
    }
    // Full recompute on the same device: one prefill of prompt + output; every generated token is
    // that pass's argmax.
    auto backend = kernels::make_backend(test::device(), 2);
    auto m = model::load_causal_lm(dir, *backend, {.precision = model::Precision::kExact});
    for (size_t i = 0; i < prompts.size(); ++i) {
        std::vector<int32_t> seq = prompt(prompts[i].first, prompts[i].second);
        seq.insert(seq.end(), alone[i].begin(), alone[i].end() - 1);
        Tensor logits = runtime::sequence_logits(*m, seq, {});
        int64_t vocab = logits.dim(1);
        for (size_t t = 0; t < alone[i].size(); ++t) {
            const float* row = logits.data<float>() + (prompts[i].second - 1 + t) * vocab;
            EXPECT_EQ(std::max_element(row, row + vocab) - row, alone[i][t]) << "request " << i << " token " << t;
        }
    }
    EXPECT_GT(e->stats().steps, 20);
}

TEST_F(EngineTest, BatchedGreedyEqualsAloneAndFullRecompute) {
    expect_batched_greedy_consistent(*dir_, *ids_, kPrompts, [](int budget, bool async) { return engine(budget, 64 << 20, async); });
}

// The same on DeepSeek-V4.1 (YOCO sources, candidate filter, pair pooling with carries).
TEST(EngineV41, BatchedGreedyEqualsAloneAndFullRecompute) {
    std::string dir = test::make_model_dir("v41/v41_tiny_a", 512);
    SafetensorsFile ref(dir + "/reference.safetensors");
    Tensor t = ref.tensor("input_ids");
    std::vector<int32_t> ids(t.data<int64_t>(), t.data<int64_t>() + t.numel());
    std::vector<std::pair<int, int>> prompts = {{0, 5}, {10, 17}, {3, 40}, {50, 30}, {7, 70}, {60, 3}};
    expect_batched_greedy_consistent(dir, ids, prompts, [&](int budget, bool async) {
        EngineConfig c;
        c.model.path = dir;
        c.model.threads = 2;
        test::on_test_device(c.model);
        c.cache.memory_bytes = 64 << 20;
        c.cache.max_sequences = 16;
        c.cache.block_size = 4;
        c.scheduler.max_batch_tokens = budget;
        c.scheduler.async_scheduling = async;
        return Engine::create(c);
    });
}

// HF greedy continuations (each step a full forward without cache, scripts/gen_v4_greedy_reference.py)
// of six prompts, all generated in one batch by the engine.
TEST(EngineHfGreedy, BatchedGenerationEqualsHfFullForwardRecompute) {
    for (auto [fixture, vocab] : {std::pair{"v4_tiny_a", 1024}, std::pair{"v4_tiny_b", 768}}) {
        EngineConfig c;
        c.model.path = test::make_model_dir(std::string("v4/") + fixture, vocab);
        c.model.threads = 2;
        test::on_test_device(c.model);
        c.cache.memory_bytes = 16 << 20;
        c.scheduler.max_batch_tokens = 24;
        auto e = Engine::create(c);
        SafetensorsFile ref(test::data_path(std::string("v4/") + fixture + "/greedy_reference.safetensors"));
        std::vector<std::shared_ptr<RequestStream>> streams;
        std::vector<std::vector<int32_t>> expected;
        for (int i = 0; ref.contains("prompt_" + std::to_string(i)); ++i) {
            GenerationRequest r;
            Tensor p = ref.tensor("prompt_" + std::to_string(i)), g = ref.tensor("greedy_" + std::to_string(i));
            for (int64_t j = 0; j < p.numel(); ++j) r.prompt_tokens.push_back(static_cast<int32_t>(p.data<int64_t>()[j]));
            expected.emplace_back();
            for (int64_t j = 0; j < g.numel(); ++j) expected.back().push_back(static_cast<int32_t>(g.data<int64_t>()[j]));
            r.sampling.temperature = 0;
            r.sampling.ignore_eos = true;
            r.sampling.max_tokens = static_cast<int>(g.numel());
            streams.push_back(e->submit(std::move(r)));
        }
        ASSERT_EQ(streams.size(), 6u);
        for (size_t i = 0; i < streams.size(); ++i) EXPECT_EQ(collect(*streams[i]).tokens[0], expected[i]) << fixture << " prompt " << i;
    }
}

TEST_F(EngineTest, PreemptionUnderASmallCacheKeepsResults) {
    std::vector<std::vector<int32_t>> alone;
    {
        auto e = engine(512, 64 << 20, false);
        for (auto [b, n] : kPrompts) alone.push_back(collect(*e->submit(greedy(prompt(b, n), 30))).tokens[0]);
    }
    // ~300 tokens of compressed entries for 6 sequences (and the prefix cache's carry snapshots)
    auto e = engine(64, 240 << 10, true, 6);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (auto [b, n] : kPrompts) streams.push_back(e->submit(greedy(prompt(b, n), 30)));
    for (size_t i = 0; i < streams.size(); ++i) {
        Result r = collect(*streams[i]);
        EXPECT_EQ(r.tokens[0], alone[i]) << "request " << i << " " << r.error;
    }
    EXPECT_GT(e->stats().preemptions, 0);
}

TEST_F(EngineTest, SeededSamplingDoesNotDependOnTheBatch) {
    auto sampled = [&](int64_t seed) {
        GenerationRequest r = greedy(prompt(20, 30), 25);
        r.sampling.temperature = 0.9f;
        r.sampling.top_p = 0.95f;
        r.sampling.top_k = 50;
        r.sampling.seed = seed;
        return r;
    };
    auto e = engine(512, 64 << 20, false);
    auto alone = collect(*e->submit(sampled(7))).tokens[0];
    auto e2 = engine(16);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 4; ++i) streams.push_back(e2->submit(greedy(prompt(i * 10, 33), 25)));
    auto same = e2->submit(sampled(7)), other = e2->submit(sampled(8));
    EXPECT_EQ(collect(*same).tokens[0], alone);
    EXPECT_NE(collect(*other).tokens[0], alone);
    for (auto& s : streams) collect(*s);
}

TEST_F(EngineTest, StopConditionsNAndLogprobs) {
    auto e = engine();
    Result base = collect(*e->submit(greedy(prompt(0, 12), 16)));
    ASSERT_EQ(base.tokens[0].size(), 16u);
    // Greedy with logprobs: the same tokens as without, and a logprob per token.
    GenerationRequest with_logprobs = greedy(prompt(0, 12), 16);
    with_logprobs.sampling.logprobs = 0;
    Result host_greedy = collect(*e->submit(with_logprobs));
    EXPECT_EQ(host_greedy.tokens[0], base.tokens[0]);
    ASSERT_EQ(host_greedy.logprobs[0].size(), 16u);
    // A stop token id ends the sequence at its first occurrence (the token is counted, no text).
    GenerationRequest r = greedy(prompt(0, 12), 16);
    r.sampling.stop_token_ids = {base.tokens[0][5]};
    Result stopped = collect(*e->submit(r));
    size_t first = std::find(base.tokens[0].begin(), base.tokens[0].end(), base.tokens[0][5]) - base.tokens[0].begin();
    EXPECT_EQ(stopped.tokens[0].size(), first + 1);
    EXPECT_EQ(stopped.finish[0], FinishReason::kStop);
    // A stop string spanning token boundaries: the text stops right before it.
    ASSERT_GE(base.text[0].size(), 12u);
    std::string stop = base.text[0].substr(6, 4);
    r = greedy(prompt(0, 12), 16);
    r.sampling.stop = {stop};
    Result by_string = collect(*e->submit(r));
    EXPECT_EQ(by_string.text[0], base.text[0].substr(0, base.text[0].find(stop)));
    EXPECT_EQ(by_string.finish[0], FinishReason::kStop);
    // n > 1 with sampling: n independent sequences; logprobs of the chosen token and the top 3.
    r = greedy(prompt(0, 12), 8);
    r.sampling.temperature = 1.0f;
    r.sampling.n = 3;
    r.sampling.seed = 1;
    r.sampling.logprobs = 3;
    Result many = collect(*e->submit(r), 3);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(many.tokens[i].size(), 8u);
        ASSERT_EQ(many.logprobs[i].size(), 8u);
        for (const auto& lp : many.logprobs[i]) EXPECT_LE(lp.logprob, 0.0f);
    }
    EXPECT_NE(many.tokens[0], many.tokens[1]);
    EXPECT_EQ(many.completion_tokens, 24);
}

TEST_F(EngineTest, CancellationAndBadRequests) {
    auto e = engine();
    auto stream = e->submit(greedy(prompt(0, 50), static_cast<int>(e->max_model_len()) - 50));
    auto first = stream->next();
    ASSERT_TRUE(first.has_value());
    stream->cancel();
    Result r = collect(*stream);
    EXPECT_EQ(r.finish[0], FinishReason::kCancelled);
    EXPECT_EQ(e->stats().requests_running, 0);

    GenerationRequest bad = greedy(prompt(0, 5), 10);
    bad.sampling.top_p = 1.5f;
    EXPECT_NE(collect(*e->submit(bad)).error.find("top_p"), std::string::npos);
    GenerationRequest huge = greedy(prompt(0, 5), 1 << 30);
    EXPECT_NE(collect(*e->submit(huge)).error.find("maximum context"), std::string::npos);
    GenerationRequest oov = greedy({1, 2, 5000}, 4);
    EXPECT_NE(collect(*e->submit(oov)).error.find("out of range"), std::string::npos);
    GenerationRequest text;
    text.prompt = "hello world";
    text.sampling.max_tokens = 3;
    EXPECT_EQ(collect(*e->submit(text)).tokens[0].size(), 3u);
}

TEST_F(EngineTest, ManyConcurrentRequestsWithCancellations) {
    EngineConfig c;
    c.model.path = *dir_;
    c.model.threads = 2;
    test::on_test_device(c.model);
    c.cache.memory_bytes = 1 << 20;
    c.cache.max_sequences = 12;
    c.cache.block_size = 1;  // block tables grow every few tokens while steps are in flight
    c.scheduler.max_batch_tokens = 24;
    auto e = Engine::create(c);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 24; ++i) streams.push_back(e->submit(greedy(prompt(i * 5, 3 + (i * 7) % 40), 6 + i % 9)));
    for (int i = 0; i < 24; i += 3) streams[i]->cancel();
    for (int i = 0; i < 24; ++i) {
        Result r = collect(*streams[i]);
        if (i % 3 == 0) {
            EXPECT_TRUE(r.finish[0] == FinishReason::kCancelled || r.finish[0] == FinishReason::kLength);
        } else {
            EXPECT_EQ(r.tokens[0].size(), static_cast<size_t>(6 + i % 9)) << "request " << i;
        }
    }
    EngineStats st = e->stats();
    EXPECT_EQ(st.requests_finished, 24);
    EXPECT_EQ(st.requests_running + st.requests_waiting, 0);
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// --trace: the file is Chrome-trace JSON whose spans account for the run: one forward per engine
// step, sampled rows adding up to the generated tokens, spans on named tracks.
TEST(EngineTrace, SpansAccountForEveryStepAndToken) {
    std::string dir = test::make_model_dir("v4/v4_tiny_a", 1024);
    std::string path = ::testing::TempDir() + "/engine_trace.json";
    std::remove(path.c_str());
    EngineConfig c;
    c.model.path = dir;
    c.model.threads = 2;
    test::on_test_device(c.model);
    c.cache.memory_bytes = 64 << 20;
    c.scheduler.max_batch_tokens = 16;
    c.trace_path = path;
    auto e = Engine::create(c);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 5; ++i) {
        GenerationRequest r;
        r.prompt_tokens = std::vector<int32_t>(10 + 7 * i, 5 + i);
        r.sampling.max_tokens = 6 + i;
        r.sampling.ignore_eos = true;
        r.sampling.temperature = i % 2 ? 0.8f : 0.0f;
        streams.push_back(e->submit(r));
    }
    for (auto& s : streams) collect(*s);
    EngineStats stats = e->stats();
    e->shutdown(false);
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << "no trace at " << path;
    nlohmann::json events = nlohmann::json::parse(in)["traceEvents"];
    std::map<std::string, int64_t> count;
    int64_t rows = 0;
    std::set<std::string> tracks;
    for (const auto& ev : events) {
        count[ev["name"].get<std::string>()]++;
        if (ev["name"] == "commit") rows += ev["args"]["rows"].get<int64_t>();
        if (ev["ph"] == "M") tracks.insert(ev["args"]["name"].get<std::string>());
        if (ev["ph"] == "X") EXPECT_GE(ev["dur"].get<int64_t>(), 0);
    }
    EXPECT_EQ(count["forward"], stats.steps);
    EXPECT_EQ(count["commit"], stats.steps);
    EXPECT_EQ(rows, stats.generated_tokens);
    EXPECT_EQ(stats.generated_tokens, 6 + 7 + 8 + 9 + 10);
    for (const char* name : {"schedule", "launch", "wait", "sample", "finish"}) EXPECT_GT(count[name], 0) << name;
    EXPECT_EQ(tracks, (std::set<std::string>{"engine", "step executor"}));
}

}  // namespace
}  // namespace deepinfer
