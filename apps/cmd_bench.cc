// `deepinfer bench`: offline throughput. N requests of random prompt tokens, or pieces of given text
// files (fixed input and output lengths, EOS ignored) kept at a given concurrency; prints requests/s, input and output tokens/s,
// and TTFT / TPOT percentiles (--json for machines). With --json-schema / --regex / --grammar it
// runs two passes in one process after a short warm-up: constrained, then unconstrained with each
// request generating exactly as many tokens as its constrained twin did (a grammar's end stops a
// sequence even with EOS ignored), on fresh prompts of the same length (no prefix-cache hits
// between passes), and reports both and the ratio of their output throughputs.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
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
    cmd->add_option("--temperature", o.temperature, "sampling temperature (0 = greedy, chosen on the device)")->check(CLI::NonNegativeNumber);
    cmd->add_flag("--json", o.json, "print one JSON object");
    cmd->add_option("--prompts-from", o.prompt_files,
                    "text files: prompts are consecutive pieces of --input-len tokens of them, file after file "
                    "(default: random tokens)")
        ->check(CLI::ExistingFile);
    add_engine_options(cmd, o.engine);
    add_grammar_options(cmd, o.grammar);
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

Timing run_request(Engine& engine, std::vector<int32_t> prompt, const BenchOptions& o, int output_len, uint64_t seed,
                   const GrammarSpec& grammar) {
    GenerationRequest r;
    r.prompt_tokens = std::move(prompt);
    r.sampling.max_tokens = output_len;
    r.sampling.ignore_eos = true;
    r.sampling.seed = seed;
    r.sampling.temperature = o.temperature;
    r.grammar = grammar;
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

// `count` prompts of `len` tokens: consecutive pieces of the files' tokens, file after file, again
// from the first when they run out.
std::vector<std::vector<int32_t>> prompts_from_files(const Engine& engine, const std::vector<std::string>& files, int count, int len) {
    std::vector<std::vector<int32_t>> pieces;
    for (const auto& f : files) {
        std::ifstream in(f, std::ios::binary);
        DI_CHECK(in.good(), "cannot read {}", f);
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::vector<int32_t> ids = engine.tokenize(text, true);
        for (size_t at = 0; at + static_cast<size_t>(len) <= ids.size(); at += static_cast<size_t>(len))
            pieces.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(at), ids.begin() + static_cast<std::ptrdiff_t>(at) + len);
    }
    DI_CHECK(!pieces.empty(), "--prompts-from: no file holds {} tokens", len);
    std::vector<std::vector<int32_t>> out;
    for (int i = 0; i < count; ++i) out.push_back(pieces[static_cast<size_t>(i) % pieces.size()]);
    return out;
}

// What speculative decoding did in a pass: verifications, drafts, kept drafts (in total and per
// draft position) and the mean tokens a verification delivered.
nlohmann::json speculative_delta(const SpeculativeStats& now, const SpeculativeStats& before) {
    int64_t v = now.verifications - before.verifications, kept = now.accepted_tokens - before.accepted_tokens;
    nlohmann::json rate = nlohmann::json::array();
    for (size_t i = 0; i < now.proposed_at.size(); ++i) {
        int64_t proposed = now.proposed_at[i] - (i < before.proposed_at.size() ? before.proposed_at[i] : 0);
        int64_t accepted = now.accepted_at[i] - (i < before.accepted_at.size() ? before.accepted_at[i] : 0);
        rate.push_back(proposed > 0 ? static_cast<double>(accepted) / static_cast<double>(proposed) : 0.0);
    }
    return {{"verifications", v}, {"draft_tokens", now.draft_tokens - before.draft_tokens}, {"accepted_tokens", kept},
            {"mean_tokens_per_verification", v > 0 ? static_cast<double>(kept + v) / static_cast<double>(v) : 0.0},
            {"acceptance_by_position", rate}};
}

// One pass over the prompts at the configured concurrency.
nlohmann::json run_pass(Engine& engine, const std::vector<std::vector<int32_t>>& prompts, const BenchOptions& o,
                        std::vector<int>& output_lens, const GrammarSpec& grammar, bool progress) {
    int num = static_cast<int>(prompts.size());
    int concurrency = o.concurrency > 0 ? std::min(o.concurrency, num) : num;
    std::vector<Timing> timings(num);
    std::atomic<int> next{0}, done{0};
    std::atomic<int64_t> tokens{0};
    ProgressBar bar(num, grammar.active() ? "constrained" : "requests");
    std::mutex bar_mutex;
    EngineStats before = engine.stats();
    auto start = Clock::now();
    std::vector<std::thread> clients;
    for (int c = 0; c < concurrency; ++c)
        clients.emplace_back([&] {
            for (int i; (i = next++) < num;) {
                timings[i] = run_request(engine, prompts[i], o, output_lens[i], o.seed + i, grammar);
                output_lens[i] = std::max(1, timings[i].output_tokens);
                tokens += timings[i].output_tokens;
                int d = ++done;
                if (progress) {
                    std::lock_guard<std::mutex> lock(bar_mutex);
                    bar.update(d, tokens);
                }
            }
        });
    for (auto& t : clients) t.join();
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    if (progress) bar.finish();
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
    EngineStats st = engine.stats();
    return {{"concurrency", concurrency}, {"failed", failed}, {"duration_s", secs}, {"requests_per_s", (num - failed) / secs},
            {"input_tokens_per_s", in_tokens / secs}, {"output_tokens_per_s", out_tokens / secs}, {"output_tokens", out_tokens},
            {"ttft_ms", {{"p50", percentile(ttft, 0.5)}, {"p90", percentile(ttft, 0.9)}, {"p99", percentile(ttft, 0.99)}}},
            {"tpot_ms", {{"p50", percentile(tpot, 0.5)}, {"p90", percentile(tpot, 0.9)}, {"p99", percentile(tpot, 0.99)}}},
            {"engine_steps", st.steps - before.steps}, {"preemptions", st.preemptions - before.preemptions},
            {"grammar_masks", st.grammar_masks - before.grammar_masks},
            {"grammar_late_masks", st.grammar_late_masks - before.grammar_late_masks},
            {"speculative", speculative_delta(st.speculative, before.speculative)}};
}

void print_pass(const char* title, const nlohmann::json& j, int num_prompts) {
    std::printf("%srequests: %d (failed %ld) at concurrency %d in %.2f s\n", title, num_prompts, j["failed"].get<long>(),
                j["concurrency"].get<int>(), j["duration_s"].get<double>());
    std::printf("throughput: %.2f requests/s, %.1f input tokens/s, %.1f output tokens/s\n", j["requests_per_s"].get<double>(),
                j["input_tokens_per_s"].get<double>(), j["output_tokens_per_s"].get<double>());
    std::printf("TTFT ms: p50 %.1f  p90 %.1f  p99 %.1f\n", j["ttft_ms"]["p50"].get<double>(), j["ttft_ms"]["p90"].get<double>(),
                j["ttft_ms"]["p99"].get<double>());
    std::printf("TPOT ms: p50 %.1f  p90 %.1f  p99 %.1f\n", j["tpot_ms"]["p50"].get<double>(), j["tpot_ms"]["p90"].get<double>(),
                j["tpot_ms"]["p99"].get<double>());
    std::printf("engine: %ld steps, %ld preemptions\n", j["engine_steps"].get<long>(), j["preemptions"].get<long>());
    const nlohmann::json& sp = j["speculative"];
    if (sp["verifications"].get<long>() > 0) {
        std::printf("speculative: %ld verifications, %ld of %ld drafts kept, %.2f tokens per verification; kept by position:",
                    sp["verifications"].get<long>(), sp["accepted_tokens"].get<long>(), sp["draft_tokens"].get<long>(),
                    sp["mean_tokens_per_verification"].get<double>());
        for (const auto& r : sp["acceptance_by_position"]) std::printf(" %.2f", r.get<double>());
        std::printf("\n");
    }
    if (j["grammar_masks"].get<long>() > 0)
        std::printf("grammar: %ld token masks, %ld late (past the step's deadline)\n", j["grammar_masks"].get<long>(),
                    j["grammar_late_masks"].get<long>());
}

}  // namespace

int run_bench(BenchOptions& o, const std::string& log_level) {
    GrammarSpec grammar = o.grammar.finish();
    auto engine = Engine::create(finish_engine_config(o.engine, log_level));
    if (grammar.active()) {
        std::string bad = engine->check_grammar(grammar);
        DI_CHECK(bad.empty(), "the grammar: {}", bad);
    }
    std::mt19937_64 rng(o.seed);
    auto random_prompts = [&] {
        if (!o.prompt_files.empty()) return prompts_from_files(*engine, o.prompt_files, o.num_prompts, o.input_len);
        std::vector<std::vector<int32_t>> prompts(o.num_prompts);
        for (auto& p : prompts)
            for (int i = 0; i < o.input_len; ++i) p.push_back(static_cast<int32_t>(rng() % engine->vocab_size()));
        return prompts;
    };
    std::vector<int> lens(o.num_prompts, o.output_len);
    nlohmann::json j = {{"model", engine->model_name()}, {"num_prompts", o.num_prompts}, {"input_len", o.input_len},
                        {"output_len", o.output_len}, {"temperature", o.temperature}};
    if (grammar.active()) {  // both passes after the same warm-up (allocations, device graphs)
        std::vector<int> warm(o.num_prompts, std::min(o.output_len, 8));
        run_pass(*engine, random_prompts(), o, warm, GrammarSpec{}, false);
        nlohmann::json constrained = run_pass(*engine, random_prompts(), o, lens, grammar, !o.json);
        nlohmann::json free = run_pass(*engine, random_prompts(), o, lens, GrammarSpec{}, !o.json);
        j["unconstrained"] = free;
        j["constrained"] = constrained;
        j["constrained_vs_unconstrained"] = constrained["output_tokens_per_s"].get<double>() / free["output_tokens_per_s"].get<double>();
    } else {
        j.update(run_pass(*engine, random_prompts(), o, lens, GrammarSpec{}, !o.json));
    }
    j["prefix_cache"] = prefix_cache_json(engine->stats().prefix_cache);
    if (o.json) {
        std::cout << j.dump() << "\n";
    } else if (grammar.active()) {
        print_pass("constrained: ", j["constrained"], o.num_prompts);
        print_pass("unconstrained (same output lengths): ", j["unconstrained"], o.num_prompts);
        std::printf("constrained / unconstrained output throughput: %.3f\n", j["constrained_vs_unconstrained"].get<double>());
    } else {
        print_pass("", j, o.num_prompts);
        if (j["prefix_cache"]["enabled"].get<bool>())
            std::printf("prefix cache: %.1f%% of prompt tokens reused\n", 100 * j["prefix_cache"]["hit_rate"].get<double>());
    }
    bool failed = grammar.active() ? j["constrained"]["failed"].get<long>() + j["unconstrained"]["failed"].get<long>() > 0
                                   : j["failed"].get<long>() > 0;
    return failed ? 1 : 0;
}

}  // namespace deepinfer::apps
