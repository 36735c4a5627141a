// Prefix caching end to end: a request served from a cache hit in each tier (the device pool,
// host memory, a disk directory across a restart, a Redis store shared by engines) produces the
// same tokens and log-probabilities, bit for bit, as the same requests without the cache (a full
// recompute), on DeepSeek-V4 and V4.1 fixtures and the bundled model; and damaged entries, a full
// disk, a Redis that is down or restarted are misses, never a wrong output, a crash or a hang.
//
// The replay after a hit is set to layers * (window - 1) + 1 positions: beyond the reach of the
// truncated windows (v41_replay_test), so a hit must be exact.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <thread>

#include "base/error.h"
#include "tests/runtime/prefix_cache_util.h"

namespace deepinfer::test {
namespace {

namespace fs = std::filesystem;

class PrefixCacheExact : public ::testing::TestWithParam<CachedModel> {};

// A random conversation, its outputs without the cache, and an engine config with a disk tier in
// a fresh directory.
struct DiskCase {
    explicit DiskCase(const CachedModel& m) : conv(m, random_seed()), reference(conv.run_without_cache()), config(m.config(true)) {
        config.cache.prefix.disk_dir = dir.path;
    }
    Conversation conv;
    Outputs reference;
    TempDir dir;
    EngineConfig config;
};

// Turn 2 of a conversation resends turn 1 and its answer: the cached spans cover the answer too.
TEST_P(PrefixCacheExact, DeviceHit) {
    const CachedModel& m = GetParam();
    Conversation conv(m, random_seed());
    SCOPED_TRACE(conv.trace());
    auto reference = conv.run_without_cache();
    auto e = Engine::create(m.config(true));
    Outputs got = conv.run(*e);
    expect_same(got, reference);
    EXPECT_GT(got.cached_tokens.back(), 0);
    EXPECT_GT(tier(e->stats(), "device").hit_tokens, 0);
}

// The same prompt twice, its length a whole number of spans: a hit never covers the last
// position, so the second request starts from the span boundary before the prompt's end, whose
// compressor carries must have been kept although the first request's prefill did not end there.
TEST_P(PrefixCacheExact, WholeSpansPromptAgain) {
    const CachedModel& m = GetParam();
    uint32_t seed = random_seed();
    SCOPED_TRACE(m.name + " seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto e = Engine::create(m.config(true));
    int64_t span = e->stats().prefix_cache.span_tokens;
    int64_t spans = (m.replay + span) / span + 1 + rng() % 2;  // the boundary before the end lies past the replay
    std::vector<int32_t> prompt(static_cast<size_t>(spans * span));
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % m.vocab);
    Turn reference = greedy_turn(*Engine::create(m.config(false)), prompt, m.max_tokens);
    int cached = -1;
    Outputs got;
    got.turns.push_back(greedy_turn(*e, prompt, m.max_tokens));
    got.turns.push_back(greedy_turn(*e, prompt, m.max_tokens, &cached));
    expect_same(got, Outputs{{reference, reference}});
    EXPECT_EQ(cached, (spans - 1) * span - m.replay);
}

// The device pool is too small to keep turn 1's spans while an unrelated request runs: they
// move to host memory and come back from there.
TEST_P(PrefixCacheExact, HostHit) {
    const CachedModel& m = GetParam();
    Conversation conv(m, random_seed());
    SCOPED_TRACE(conv.trace());
    auto reference = conv.run_without_cache(/*filler=*/true);
    EngineConfig c = m.config(true);
    c.cache.memory_bytes = m.memory_for_tokens(conv.longest() * 3 / 4);  // 1.5 conversations in all
    c.cache.prefix.host_bytes = 64 << 20;
    auto e = Engine::create(c);
    Outputs got = conv.run(*e, /*filler=*/true);
    expect_same(got, reference);
    EngineStats st = e->stats();
    EXPECT_GT(tier(st, "device").evictions, 0);
    EXPECT_GT(tier(st, "host").hit_spans, 0);
}

// An engine writes its spans to the disk directory when it shuts down; a new engine (a restart)
// serves turn 2 from there.
TEST_P(PrefixCacheExact, DiskHitAfterRestart) {
    DiskCase t(GetParam());
    SCOPED_TRACE(t.conv.trace());
    Outputs got = t.conv.run_across_restart(t.config, t.config);
    expect_same(got, t.reference);
    EXPECT_GT(tier(got.stats.back(), "disk").hit_tokens, 0);
}

// Entries computed with other numerics (8-bit weights on the CPU, the fast precision on CUDA:
// the same cache layout, other numbers) are another namespace: an engine that computes as the
// reference does misses them and still answers as without the cache.
TEST(PrefixCacheNamespace, EntriesOfOtherNumericsAreNotUsed) {
    DiskCase t(cached_models().front());
    SCOPED_TRACE(t.conv.trace());
    EngineConfig other = t.config;
    if (device() == "cpu")
        other.model.quantize = "q8";
    else
        other.model.precision = "fast";  // the engines under test run exact
    Outputs got = t.conv.run_across_restart(other, t.config);
    EXPECT_GT(tier(got.stats.front(), "disk").writes, 0) << "the first engine wrote nothing to the disk";
    EXPECT_EQ(tier(got.stats.back(), "disk").hit_tokens, 0);
    // Turn 2 resends turn 1's answer, which the other numerics wrote: its reference is the same
    // two engines without the cache.
    EngineConfig other_uncached = other, uncached = t.config;
    other_uncached.cache.prefix.enabled = uncached.cache.prefix.enabled = false;
    expect_same(got, t.conv.run_across_restart(other_uncached, uncached));
}

// Two engines share one Redis: the second serves turn 2 from what the first stored.
TEST_P(PrefixCacheExact, RemoteHitAcrossEngines) {
    RedisServer redis;
    if (!redis.available()) GTEST_SKIP() << "redis-server is not installed (scripts/setup.sh installs it)";
    const CachedModel& m = GetParam();
    Conversation conv(m, random_seed());
    SCOPED_TRACE(conv.trace());
    auto reference = conv.run_without_cache();
    EngineConfig c = m.config(true);
    c.cache.prefix.remote_url = redis.url();
    Outputs got = conv.run_across_restart(c, c);
    expect_same(got, reference);
    EXPECT_GT(tier(got.stats.back(), "remote").hit_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, PrefixCacheExact, ::testing::ValuesIn(cached_models()),
                         [](const auto& info) { return info.param.name; });

// --- faults ----------------------------------------------------------------------------------

class PrefixCacheFaults : public ::testing::Test {
protected:
    CachedModel m = cached_models()[0];  // DeepSeek-V4: spans carry compressor state too
};

// Every stored entry is damaged after the first engine wrote it: the second engine must not use
// any (each read is a logged miss and the file goes), and still answer exactly.
TEST_F(PrefixCacheFaults, CorruptOrTruncatedDiskEntriesAreMisses) {
    for (bool truncate : {false, true}) {
        DiskCase t(m);
        SCOPED_TRACE(t.conv.trace() + (truncate ? " truncated" : " corrupted"));
        Outputs got = t.conv.run_across_restart(t.config, t.config, [&] { EXPECT_GT(damage_files(t.dir.path, truncate), 0); });
        expect_same(got, t.reference);
        PrefixCacheTierStats disk = tier(got.stats.back(), "disk");
        EXPECT_EQ(disk.hit_tokens, 0);
        EXPECT_GT(disk.errors, 0);
    }
}

// Writes fail part-way (the file size limit stands in for a full disk): nothing half-written
// stays, the engine answers exactly, and the next engine finds no entry.
TEST_F(PrefixCacheFaults, FullDiskIsAMiss) {
    DiskCase t(m);
    SCOPED_TRACE(t.conv.trace());
    Outputs got = t.conv.run_across_restart(t.config, t.config, {}, [] { return limit_file_size(1024); });
    expect_same(got, t.reference);
    EXPECT_GT(tier(got.stats.front(), "disk").errors, 0);
    EXPECT_EQ(tier(got.stats.back(), "disk").hit_tokens, 0);
    for (const auto& f : fs::directory_iterator(t.dir.path))  // the second engine's entries may be there
        EXPECT_NE(f.path().extension(), ".tmp") << "half-written entry left behind: " << f.path();
}

// No store listens at the URL: every remote operation fails fast, requests finish exactly.
TEST_F(PrefixCacheFaults, RedisDownIsAMiss) {
    Conversation conv(m, random_seed());
    SCOPED_TRACE(conv.trace());
    auto reference = conv.run_without_cache();
    EngineConfig c = m.config(true);
    c.cache.prefix.remote_url = "redis://127.0.0.1:" + std::to_string(free_loopback_port());
    auto start = std::chrono::steady_clock::now();
    Outputs got = conv.run_across_restart(c, c);
    expect_same(got, reference);
    EXPECT_GT(tier(got.stats.back(), "remote").errors, 0);
    EXPECT_EQ(tier(got.stats.back(), "remote").hit_tokens, 0);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

// The store dies between the engines (its entries with it) and comes back empty: the second
// engine's reads miss while it is down and after, its requests finish exactly, and it stores
// again once the store is back.
TEST_F(PrefixCacheFaults, RedisRestartedMidRun) {
    RedisServer redis;
    if (!redis.available()) GTEST_SKIP() << "redis-server is not installed (scripts/setup.sh installs it)";
    Conversation conv(m, random_seed());
    SCOPED_TRACE(conv.trace());
    auto reference = conv.run_without_cache();
    EngineConfig c = m.config(true);
    c.cache.prefix.remote_url = redis.url();
    Outputs got = conv.run_across_restart(c, c, [&] { redis.stop(); }, {}, [&] {
        redis.start();
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past the store's reconnect back-off
    });
    expect_same(got, reference);
    PrefixCacheTierStats remote = tier(got.stats.back(), "remote");
    EXPECT_EQ(remote.hit_tokens, 0);
    EXPECT_GT(remote.errors, 0);
    EXPECT_GT(remote.writes, 0);  // after the store came back
}

}  // namespace
}  // namespace deepinfer::test

namespace deepinfer::test {
namespace {

// A replay shorter than the window cannot refill the rings: with the prefix cache on, such an
// engine is refused (V4 as well as V4.1), and accepted with the cache off.
TEST(PrefixCacheConfig, ReplayMustCoverTheWindowPlusRollback) {
    for (const CachedModel& m : {cached_models()[0], cached_models()[1]}) {
        SCOPED_TRACE(m.name);
        EngineConfig c = m.config(true);
        c.model.swa_replay_tokens = 6;  // windows are 16 and 8
        c.model.rollback_tokens = 3;
        EXPECT_THROW(Engine::create(c), Error);
        c.cache.prefix.enabled = false;
        if (m.name == "v4_tiny") EXPECT_NO_THROW(Engine::create(c));  // V4 has no decoder replay to check
    }
}

}  // namespace
}  // namespace deepinfer::test
