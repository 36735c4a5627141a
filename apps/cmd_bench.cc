// `deepinfer bench`: offline throughput. N requests of random prompt tokens (fixed input and output
// lengths, EOS ignored) kept at a given concurrency; prints requests/s, input and output tokens/s,
// and TTFT / TPOT percentiles (--json for machines).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/progress.h"
#include "base/error.h"
#include "deepinfer/engine.h"

namespace deepinfer::apps {

void add_bench_command(CLI::App& app, BenchOptions& o) {
    auto* cmd = app.add_subcommand("bench", "Offline throughput benchmark with random prompts");
    cmd->add_option("--num-prompts", o.num_prompts)->check(CLI::PositiveNumber);
    cmd->add_option("--input-len", o.input_len, "prompt tokens per request")->check(CLI::PositiveNumber);
    cmd->add_option("--output-len", o.output_len, "generated tokens per request")->check(CLI::PositiveNumber);
    cmd->add_option("--concurrency", o.concurrency, "requests in flight (default: all at once)")->check(CLI::PositiveNumber);
    cmd->add_option("--seed", o.seed, "prompt and sampling seed");
    SamplingParams& p = o.sampling;
    cmd->add_option("--temperature", p.temperature, "sampling temperature (0 = greedy)")->check(CLI::NonNegativeNumber);
    cmd->add_option("--top-k", p.top_k, "0 = off");
    cmd->add_option("--top-p", p.top_p, "1 = off");
    cmd->add_option("--min-p", p.min_p, "0 = off");
    cmd->add_option("--repetition-penalty", p.repetition_penalty);
    cmd->add_option("--presence-penalty", p.presence_penalty);
    cmd->add_option("--frequency-penalty", p.frequency_penalty);
    cmd->add_option("--logprobs", p.logprobs, "-1 = none; N = the chosen token's and the top N");
    cmd->add_flag("--json", o.json, "print one JSON object");
    add_engine_options(cmd, o.engine);
}

namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
    double ttft = 0, tpot = 0, latency = 0;
    int prompt_tokens = 0, output_tokens = 0;
    bool ok = false;
};

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

Timing run_request(Engine& engine, std::vector<int32_t> prompt, int output_len, uint64_t seed, const SamplingParams& sampling) {
    GenerationRequest r;
    r.prompt_tokens = std::move(prompt);
    r.sampling = sampling;
    r.sampling.max_tokens = output_len;
    r.sampling.ignore_eos = true;
    r.sampling.seed = seed;
    Timing t;
    auto start = Clock::now();
    auto stream = engine.submit(std::move(r));
    Clock::time_point first{}, last{};
    while (auto ev = stream->next()) {
        if (!ev->error.empty()) return t;
        for (const auto& s : ev->sequences) {
            if (s.tokens.empty()) continue;
            last = Clock::now();
            if (first == Clock::time_point{}) first = last;
        }
        t.prompt_tokens = ev->prompt_tokens;
        t.output_tokens = ev->completion_tokens;
    }
    t.ok = t.output_tokens > 0;
    t.ttft = std::chrono::duration<double>(first - start).count();
    t.latency = std::chrono::duration<double>(last - start).count();
    t.tpot = t.output_tokens > 1 ? std::chrono::duration<double>(last - first).count() / (t.output_tokens - 1) : 0;
    return t;
}

// Hit rate and tokens reused per tier, with each tier's read-back bandwidth.
nlohmann::json prefix_cache_json(const PrefixCacheStats& p) {
    nlohmann::json tiers = nlohmann::json::array();
    for (const auto& t : p.tiers)
        tiers.push_back({{"tier", t.tier}, {"hit_spans", t.hit_spans}, {"hit_tokens", t.hit_tokens},
                         {"hit_rate", p.lookup_tokens > 0 ? static_cast<double>(t.hit_tokens) / p.lookup_tokens : 0.0},
                         {"bytes_read", t.bytes_read},
                         {"read_gbps", t.read_seconds > 0 ? t.bytes_read / t.read_seconds / 1e9 : 0.0},
                         {"evictions", t.evictions}, {"errors", t.errors}});
    return {{"enabled", p.enabled}, {"span_tokens", p.span_tokens}, {"lookup_tokens", p.lookup_tokens},
            {"hit_tokens", p.hit_tokens},
            {"hit_rate", p.lookup_tokens > 0 ? static_cast<double>(p.hit_tokens) / p.lookup_tokens : 0.0}, {"tiers", tiers}};
}

}  // namespace

int run_bench(BenchOptions& o, const std::string& log_level) {
    auto engine = Engine::create(finish_engine_config(o.engine, log_level));
    if (std::string bad = o.sampling.validate(engine->vocab_size()); !bad.empty()) throw Error("bench: " + bad);
    std::mt19937_64 rng(o.seed);
    std::vector<std::vector<int32_t>> prompts(o.num_prompts);
    for (auto& p : prompts)
        for (int i = 0; i < o.input_len; ++i) p.push_back(static_cast<int32_t>(rng() % engine->vocab_size()));
    int concurrency = o.concurrency > 0 ? std::min(o.concurrency, o.num_prompts) : o.num_prompts;
    std::vector<Timing> timings(o.num_prompts);
    std::atomic<int> next{0}, done{0};
    std::atomic<int64_t> tokens{0};
    ProgressBar bar(o.num_prompts, "requests");
    std::mutex bar_mutex;
    auto start = Clock::now();
    std::vector<std::thread> clients;
    for (int c = 0; c < concurrency; ++c)
        clients.emplace_back([&] {
            for (int i; (i = next++) < o.num_prompts;) {
                timings[i] = run_request(*engine, prompts[i], o.output_len, o.seed + i, o.sampling);
                tokens += timings[i].output_tokens;
                int d = ++done;
                if (!o.json) {
                    std::lock_guard<std::mutex> lock(bar_mutex);
                    bar.update(d, tokens);
                }
            }
        });
    for (auto& t : clients) t.join();
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    if (!o.json) bar.finish();

    std::vector<double> ttft, tpot;
    int64_t in_tokens = 0, out_tokens = 0, failed = 0;
    for (const auto& t : timings) {
        if (!t.ok) {
            ++failed;
            continue;
        }
        ttft.push_back(t.ttft * 1e3);
        tpot.push_back(t.tpot * 1e3);
        in_tokens += t.prompt_tokens;
        out_tokens += t.output_tokens;
    }
    EngineStats st = engine->stats();
    nlohmann::json j = {
        {"model", engine->model_name()}, {"num_prompts", o.num_prompts}, {"input_len", o.input_len},
        {"output_len", o.output_len}, {"concurrency", concurrency}, {"temperature", o.sampling.temperature},
        {"sampling", {{"top_k", o.sampling.top_k}, {"top_p", o.sampling.top_p}, {"min_p", o.sampling.min_p},
                      {"repetition_penalty", o.sampling.repetition_penalty}, {"presence_penalty", o.sampling.presence_penalty},
                      {"frequency_penalty", o.sampling.frequency_penalty}, {"logprobs", o.sampling.logprobs}}},
        {"failed", failed}, {"duration_s", secs},
        {"requests_per_s", (o.num_prompts - failed) / secs}, {"input_tokens_per_s", in_tokens / secs},
        {"output_tokens_per_s", out_tokens / secs},
        {"ttft_ms", {{"p50", percentile(ttft, 0.5)}, {"p90", percentile(ttft, 0.9)}, {"p99", percentile(ttft, 0.99)}}},
        {"tpot_ms", {{"p50", percentile(tpot, 0.5)}, {"p90", percentile(tpot, 0.9)}, {"p99", percentile(tpot, 0.99)}}},
        {"engine_steps", st.steps}, {"preemptions", st.preemptions}, {"prefix_cache", prefix_cache_json(st.prefix_cache)}};
    if (o.json) {
        std::cout << j.dump() << "\n";
    } else {
        std::printf("requests: %d (failed %ld) at concurrency %d in %.2f s\n", o.num_prompts, static_cast<long>(failed),
                    concurrency, secs);
        std::printf("throughput: %.2f requests/s, %.1f input tokens/s, %.1f output tokens/s\n",
                    j["requests_per_s"].get<double>(), j["input_tokens_per_s"].get<double>(),
                    j["output_tokens_per_s"].get<double>());
        std::printf("TTFT ms: p50 %.1f  p90 %.1f  p99 %.1f\n", percentile(ttft, 0.5), percentile(ttft, 0.9), percentile(ttft, 0.99));
        std::printf("TPOT ms: p50 %.1f  p90 %.1f  p99 %.1f\n", percentile(tpot, 0.5), percentile(tpot, 0.9), percentile(tpot, 0.99));
        std::printf("engine: %ld steps, %ld preemptions\n", static_cast<long>(st.steps), static_cast<long>(st.preemptions));
        if (st.prefix_cache.enabled)
            std::printf("prefix cache: %.1f%% of prompt tokens reused\n", 100 * j["prefix_cache"]["hit_rate"].get<double>());
    }
    return failed ? 1 : 0;
}

}  // namespace deepinfer::apps
