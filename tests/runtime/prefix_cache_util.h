#pragma once
// Helpers of the prefix-cache tests: the models (fixtures and the bundled one) with a replay long
// enough to be exact, a random three-turn conversation (each turn resends the whole history plus
// a new message), runs with and without the cache, and the faults the tests inject.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "deepinfer/engine.h"
#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "tests/runtime/redis_server.h"
#include "tests/runtime/test_models.h"

namespace deepinfer::test {

struct CachedModel {
    std::string name, dir;
    int vocab = 0;
    int replay = 0;       // layers * (window - 1) + 1: an exact replay
    int block_size = 4;
    int prefix = 0;       // tokens the turns share before the first message
    int max_tokens = 6;

    EngineConfig config(bool cache) const {
        EngineConfig c;
        c.model.path = dir;
        c.model.threads = 2;
        on_test_device(c.model);
        c.model.swa_replay_tokens = replay;
        c.cache.memory_bytes = 64 << 20;
        c.cache.max_sequences = 2;
        c.cache.block_size = block_size;
        c.cache.prefix.enabled = cache;
        // On CUDA the random V4 fixture's logits move in the last bits with the batch shape in
        // which replayed rows run; its comparisons with and without the cache need the
        // batch-invariant kernels (V4.1 and the bundled model match bit for bit either way).
        c.deterministic = device() != "cpu" && name == "v4_tiny";
        return c;
    }
    // The cache memory that holds `tokens` positions for each of 2 sequences.
    int64_t memory_for_tokens(int64_t tokens) const {
        auto backend = kernels::make_cpu_backend(1);
        auto m = model::load_causal_lm(dir, *backend);
        return m->make_cache(m->plan_cache_for_tokens(2, tokens, block_size))->bytes();
    }
};

inline void PrintTo(const CachedModel& m, std::ostream* os) { *os << m.name; }

inline std::vector<CachedModel> cached_models() {
    return {
        {"v4_tiny", make_model_dir("v4/v4_tiny_a", 1024), 1024, 5 * 15 + 1, 4, 150},
        {"v41_tiny", make_model_dir("v41/v41_tiny_a", 512), 512, 9 * 7 + 1, 4, 130},
        // Next to tests/data, so a copy of the tree elsewhere (the GPU machine) finds it too.
        {"nano", data_path("../../models/deepinfer-nano"), 4096, 6 * 63 + 1, 16, 600},
    };
}

// A fresh seed per run; DEEPINFER_TEST_SEED replays one a failure printed.

struct Turn {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
};

struct Outputs {
    std::vector<Turn> turns;
    std::vector<int> cached_tokens;   // per turn
    std::vector<EngineStats> stats;   // per engine, after it shut down
};

inline PrefixCacheTierStats tier(const EngineStats& s, const std::string& name) {
    for (const auto& t : s.prefix_cache.tiers)
        if (t.tier == name) return t;
    ADD_FAILURE() << "no prefix-cache tier " << name;
    return {};
}

inline void expect_same(const Outputs& got, const Outputs& want) {
    ASSERT_EQ(got.turns.size(), want.turns.size());
    for (size_t i = 0; i < got.turns.size(); ++i) {
        EXPECT_EQ(got.turns[i].tokens, want.turns[i].tokens) << "turn " << i;
        ASSERT_EQ(got.turns[i].logprobs.size(), want.turns[i].logprobs.size()) << "turn " << i;
        for (size_t j = 0; j < got.turns[i].logprobs.size(); ++j)  // bit for bit
            EXPECT_EQ(std::bit_cast<uint32_t>(got.turns[i].logprobs[j]), std::bit_cast<uint32_t>(want.turns[i].logprobs[j]))
                << "turn " << i << " token " << j << ": " << got.turns[i].logprobs[j] << " vs " << want.turns[i].logprobs[j];
    }
}

// A greedy request with log-probabilities; `cached` gets the prompt tokens served from the cache,
// `sink` the request's prefix spans (prefill/decode disaggregation).
inline Turn greedy_turn(Engine& e, const std::vector<int32_t>& prompt, int max_tokens, int* cached = nullptr,
                        std::shared_ptr<PrefixSpanSink> sink = {}) {
    GenerationRequest r;
    r.prompt_tokens = prompt;
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    r.sampling.logprobs = 0;
    r.span_sink = std::move(sink);
    Turn t;
    if (cached) *cached = 0;
    auto stream = e.submit(std::move(r));
    while (auto ev = stream->next()) {
        EXPECT_TRUE(ev->error.empty()) << ev->error;
        if (cached) *cached = std::max(*cached, ev->cached_tokens);
        for (const auto& s : ev->sequences) {
            t.tokens.insert(t.tokens.end(), s.tokens.begin(), s.tokens.end());
            for (const auto& lp : s.logprobs) t.logprobs.push_back(lp.logprob);
        }
    }
    return t;
}

class Conversation {
public:
    Conversation(const CachedModel& m, uint32_t seed) : m_(m), seed_(seed) {
        std::mt19937 rng(seed);
        auto random = [&](int n) {
            std::vector<int32_t> t;
            for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(rng() % m.vocab));
            return t;
        };
        prefix_ = random(m.prefix);
        for (auto& msg : messages_) msg = random(5 + static_cast<int>(rng() % 20));
        filler_ = random(longest() - m.max_tokens);
    }
    std::string trace() const { return m_.name + " seed " + std::to_string(seed_); }
    int64_t longest() const { return m_.prefix + 60 + 3 * m_.max_tokens; }

    // Turns 1-3 on one engine (an unrelated request between turns 1 and 2 with `filler`).
    Outputs run(Engine& e, bool filler = false) {
        Outputs out;
        turn(e, 0, out);
        if (filler) generate(e, filler_);
        turn(e, 1, out);
        turn(e, 2, out);
        return out;
    }
    Outputs run_without_cache(bool filler = false) {
        auto e = Engine::create(m_.config(false));
        return run(*e, filler);
    }
    // Turn 1 on an engine that then shuts down (`at_shutdown` around its shutdown), `between`,
    // then turns 2 and 3 on a new one (`after_turn2` in between).
    Outputs run_across_restart(const EngineConfig& first, const EngineConfig& second,
                               const std::function<void()>& between = {},
                               const std::function<std::function<void()>()>& at_shutdown = {},
                               const std::function<void()>& after_turn2 = {}) {
        Outputs out;
        {
            auto e = Engine::create(first);
            turn(*e, 0, out);
            std::function<void()> undo = at_shutdown ? at_shutdown() : std::function<void()>{};
            e->shutdown(false);
            if (undo) undo();
            out.stats.push_back(e->stats());
        }
        if (between) between();
        auto e = Engine::create(second);
        turn(*e, 1, out);
        if (after_turn2) after_turn2();
        turn(*e, 2, out);
        e->shutdown(false);
        out.stats.push_back(e->stats());
        return out;
    }

private:
    std::vector<int32_t> prompt_of(int t) const {
        std::vector<int32_t> p = prefix_;
        for (int i = 0; i <= t; ++i) {
            p.insert(p.end(), messages_[i].begin(), messages_[i].end());
            if (i < t) p.insert(p.end(), answers_[i].begin(), answers_[i].end());
        }
        return p;
    }
    Turn generate(Engine& e, const std::vector<int32_t>& prompt, int* cached = nullptr) {
        return greedy_turn(e, prompt, m_.max_tokens, cached);
    }
    void turn(Engine& e, int t, Outputs& out) {
        int cached = 0;
        out.turns.push_back(generate(e, prompt_of(t), &cached));
        out.cached_tokens.push_back(cached);
        answers_[t] = out.turns.back().tokens;
    }

    CachedModel m_;
    uint32_t seed_;
    std::vector<int32_t> prefix_, filler_;
    std::array<std::vector<int32_t>, 3> messages_, answers_;
};

struct TempDir {
    TempDir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "di_prefix_XXXXXX").string();
        path = ::mkdtemp(tmpl.data());
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    std::string path;
};

// Damages every cached entry in `dir`: cut to half its size, or a run of bytes in the middle of
// its payload overwritten. Returns how many.
inline int damage_files(const std::string& dir, bool truncate) {
    int n = 0;
    for (const auto& f : std::filesystem::directory_iterator(dir)) {
        auto size = std::filesystem::file_size(f.path());
        if (truncate) {
            std::filesystem::resize_file(f.path(), size / 2);
        } else {
            std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
            io.seekp(static_cast<std::streamoff>(size / 2));
            std::string junk(256, '\x7f');
            io.write(junk.data(), static_cast<std::streamsize>(junk.size()));
        }
        ++n;
    }
    return n;
}

// Files this process writes cannot grow past `bytes` (writes fail, as on a full disk) until the
// returned function is called.
inline std::function<void()> limit_file_size(rlim_t bytes) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit old{};
    ::getrlimit(RLIMIT_FSIZE, &old);
    rlimit small{bytes, old.rlim_max};
    ::setrlimit(RLIMIT_FSIZE, &small);
    return [old] { ::setrlimit(RLIMIT_FSIZE, &old); };
}

}  // namespace deepinfer::test
