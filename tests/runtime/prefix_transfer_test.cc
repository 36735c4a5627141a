// Prefill/decode disaggregation at the engine level: a prefill engine hands a prompt's spans out
// (PrefixSpanSink), a second engine takes them in (import_prefix_spans), and its request for the
// prompt continues from them. Its tokens and log-probabilities must equal, bit for bit, an engine
// that computed everything itself (the replay is set to be exact, as in prefix_cache_test), on
// DeepSeek-V4, V4.1 and the bundled model; spans that fail their checks are dropped, never used.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "tests/runtime/prefix_cache_util.h"

namespace deepinfer::test {
namespace {

// Collects the spans an engine hands out.
class SpanCollector : public PrefixSpanSink {
public:
    void on_span(int index, std::vector<std::byte> blob) override {
        std::lock_guard<std::mutex> lock(mutex_);
        EXPECT_EQ(index, static_cast<int>(spans_.size())) << "spans must come in order";
        spans_.push_back(std::move(blob));
    }
    void on_done(int count) override {
        std::lock_guard<std::mutex> lock(mutex_);
        EXPECT_EQ(count, static_cast<int>(spans_.size()));
        ++done_calls_;
        cv_.notify_all();
    }
    // The spans once the export ended (at most `timeout`).
    std::vector<std::vector<std::byte>> wait(std::chrono::seconds timeout = std::chrono::seconds(60)) {
        std::unique_lock<std::mutex> lock(mutex_);
        EXPECT_TRUE(cv_.wait_for(lock, timeout, [&] { return done_calls_ > 0; })) << "the export never ended";
        EXPECT_EQ(done_calls_, 1);
        return spans_;
    }

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    std::vector<std::vector<std::byte>> spans_;
    int done_calls_ = 0;
};

struct Generated {
    Turn turn;
    int cached_tokens = 0;
};

Generated generate(Engine& e, const std::vector<int32_t>& prompt, int max_tokens, std::shared_ptr<PrefixSpanSink> sink = {}) {
    Generated g;
    g.turn = greedy_turn(e, prompt, max_tokens, &g.cached_tokens, std::move(sink));
    return g;
}

std::vector<int32_t> random_prompt(const CachedModel& m, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> p(static_cast<size_t>(m.prefix + 40 + rng() % 40));
    for (auto& t : p) t = static_cast<int32_t>(rng() % m.vocab);
    return p;
}

EngineConfig transfer_config(const CachedModel& m) {
    EngineConfig c = m.config(true);
    c.cache.prefix.staging_spans = 32;
    return c;
}

// The prompt's spans computed on one engine, and the engine they were computed on.
struct Exported {
    std::unique_ptr<Engine> engine;
    std::vector<std::vector<std::byte>> spans;
};

Exported export_prompt(const CachedModel& m, const std::vector<int32_t>& prompt) {
    Exported out;
    out.engine = Engine::create(transfer_config(m));
    auto sink = std::make_shared<SpanCollector>();
    generate(*out.engine, prompt, 1, sink);
    out.spans = sink->wait();
    return out;
}

class PrefixTransfer : public ::testing::TestWithParam<CachedModel> {};

// The engine publishes its stats (and has put the spans in its cache) after the step or idle pass
// that ended the export; the sink may hear of the end first. Returns the spans exported by then.
int64_t wait_for_export(const Exported& ex) {
    int64_t exported = 0;
    for (int i = 0; i < 1000 && (exported = ex.engine->stats().prefix_cache.exported_spans) < static_cast<int64_t>(ex.spans.size()); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return exported;
}

TEST_P(PrefixTransfer, DecodeEngineContinuesExactly) {
    const CachedModel& m = GetParam();
    uint32_t seed = random_seed();
    SCOPED_TRACE(m.name + " seed " + std::to_string(seed));
    std::vector<int32_t> prompt = random_prompt(m, seed);
    Turn reference = generate(*Engine::create(m.config(false)), prompt, m.max_tokens).turn;

    Exported ex = export_prompt(m, prompt);
    int64_t span = ex.engine->stats().prefix_cache.span_tokens;
    ASSERT_EQ(static_cast<int64_t>(ex.spans.size()), (static_cast<int64_t>(prompt.size()) - 1) / span);
    EXPECT_EQ(wait_for_export(ex), static_cast<int64_t>(ex.spans.size()));

    auto decode = Engine::create(transfer_config(m));
    EXPECT_EQ(decode->import_prefix_spans(ex.spans), static_cast<int>(ex.spans.size()));
    Generated got = generate(*decode, prompt, m.max_tokens);
    expect_same({{got.turn}}, {{reference}});
    EXPECT_EQ(got.cached_tokens, static_cast<int64_t>(ex.spans.size()) * span - m.replay);
    EngineStats st = decode->stats();
    EXPECT_EQ(st.prefix_cache.imported_spans, static_cast<int64_t>(ex.spans.size()));
    EXPECT_GT(tier(st, "host").hit_tokens, 0);
}

// The second request for a prompt on the prefill engine finds its spans cached: they are handed
// out from the cache (a hit) just the same.
TEST_P(PrefixTransfer, CachedSpansAreExportedToo) {
    const CachedModel& m = GetParam();
    uint32_t seed = random_seed();
    SCOPED_TRACE(m.name + " seed " + std::to_string(seed));
    std::vector<int32_t> prompt = random_prompt(m, seed);
    Exported first = export_prompt(m, prompt);
    ASSERT_EQ(wait_for_export(first), static_cast<int64_t>(first.spans.size()));  // in the cache by then
    auto sink = std::make_shared<SpanCollector>();
    Generated again = generate(*first.engine, prompt, 1, sink);
    EXPECT_GT(again.cached_tokens, 0);
    EXPECT_EQ(sink->wait(), first.spans);
}

INSTANTIATE_TEST_SUITE_P(Models, PrefixTransfer, ::testing::ValuesIn(cached_models()),
                         [](const auto& info) { return info.param.name; });

// A damaged span, and spans of another layout (another block size), are refused; the request
// then computes what it lacks and still answers exactly.
TEST(PrefixTransferChecks, DamagedOrForeignSpansAreRefused) {
    CachedModel m = cached_models()[0];
    std::vector<int32_t> prompt = random_prompt(m, random_seed());
    Turn reference = generate(*Engine::create(m.config(false)), prompt, m.max_tokens).turn;
    Exported ex = export_prompt(m, prompt);
    ASSERT_GE(ex.spans.size(), 2u);

    std::vector<std::vector<std::byte>> damaged = ex.spans;
    damaged.back()[damaged.back().size() / 2] ^= std::byte{0x40};
    auto decode = Engine::create(transfer_config(m));
    EXPECT_EQ(decode->import_prefix_spans(damaged), static_cast<int>(ex.spans.size()) - 1);
    expect_same({{generate(*decode, prompt, m.max_tokens).turn}}, {{reference}});

    CachedModel other = m;
    other.block_size = m.block_size * 2;
    auto foreign = Engine::create(transfer_config(other));
    EXPECT_EQ(foreign->import_prefix_spans(ex.spans), 0);
    Generated got = generate(*foreign, prompt, m.max_tokens);
    expect_same({{got.turn}}, {{reference}});
    EXPECT_EQ(got.cached_tokens, 0);
}

}  // namespace
}  // namespace deepinfer::test
