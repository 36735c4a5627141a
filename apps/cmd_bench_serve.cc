// `deepinfer bench-serve`: a serving load generator for any OpenAI-compatible server (the load
// itself: apps/serve_load.h). Reports requests/s, delivered output tokens/s, TTFT / TPOT / ITL
// percentiles and failures; optionally idle half-sent connections and a /health probe beside the
// load, and the server's resident memory over the run (--server-pid).
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/serve_load.h"
#include "base/error.h"
#include "base/process.h"

namespace deepinfer::apps {

void add_bench_serve_command(CLI::App& app, BenchServeOptions& o) {
    auto* cmd = app.add_subcommand("bench-serve", "Load-test an OpenAI-compatible server with streaming requests");
    LoadOptions& l = o.load;
    cmd->add_option("--host", l.host);
    cmd->add_option("--port", l.port)->check(CLI::Range(1, 65535));
    cmd->add_option("--model", l.model, "model name to send (default: the server's first model)");
    cmd->add_option("--concurrency", l.concurrency, "streams in flight (closed loop)")->check(CLI::PositiveNumber);
    cmd->add_option("--rate", l.rate, "requests per second, Poisson arrivals (open loop; overrides --concurrency)");
    cmd->add_option("--duration", l.duration_s, "seconds to keep sending")->check(CLI::PositiveNumber);
    cmd->add_option("--num-requests", l.num_requests, "stop after this many requests (0 = duration only)");
    cmd->add_option("--input-len", l.input_len)->check(CLI::PositiveNumber);
    cmd->add_option("--output-len", l.output_len)->check(CLI::PositiveNumber);
    cmd->add_option("--vocab", l.vocab, "prompt token ids are drawn from [10, vocab)")->check(CLI::PositiveNumber);
    cmd->add_option("--seed", l.seed);
    cmd->add_option("--idle-sockets", l.idle_sockets, "connections that send half a request line and wait (reopened when closed)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--health-interval-ms", l.health_interval_ms, "probe GET /health this often during the load (0 = off)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--server-pid", o.server_pid, "sample this process's resident memory");
    cmd->add_flag("--json", o.json);
}

namespace {

using nlohmann::json;

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

json percentiles(const std::vector<double>& v) {
    return {{"p50", percentile(v, 0.5)}, {"p90", percentile(v, 0.9)}, {"p99", percentile(v, 0.99)},
            {"max", v.empty() ? 0.0 : *std::max_element(v.begin(), v.end())}};
}

std::string server_model(const LoadOptions& o) {
    if (!o.model.empty()) return o.model;
    httplib::Client c(o.host, o.port);
    auto r = c.Get("/v1/models");
    DI_CHECK(r && r->status == 200, "cannot reach http://{}:{}/v1/models", o.host, o.port);
    return json::parse(r->body)["data"][0]["id"].get<std::string>();
}

json report(const BenchServeOptions& o, const LoadResult& r, const std::vector<int64_t>& rss) {
    std::vector<double> ttft, tpot, itl;
    int64_t tokens = 0, failed = 0;
    std::string first_error;
    for (const auto& s : r.samples) {
        if (!s.ok) {
            if (failed++ == 0) first_error = s.error;
            continue;
        }
        ttft.push_back(s.ttft * 1e3);
        if (s.tokens > 1) tpot.push_back((s.e2e - s.ttft) / (s.tokens - 1) * 1e3);
        for (double x : s.itl) itl.push_back(x * 1e3);
        tokens += s.tokens;
    }
    const LoadOptions& l = o.load;
    double elapsed = std::max(r.elapsed_s, 1e-9);
    json j = {{"model", l.model}, {"mode", l.rate > 0 ? "rate" : "concurrency"}, {"concurrency", l.concurrency}, {"rate", l.rate},
              {"duration_s", r.elapsed_s}, {"requests", r.samples.size()}, {"failed", failed}, {"input_len", l.input_len},
              {"output_len", l.output_len}, {"peak_streams", r.peak_streams},
              {"requests_per_s", static_cast<double>(r.samples.size() - failed) / elapsed}, {"output_tokens_per_s", tokens / elapsed},
              {"ttft_ms", percentiles(ttft)}, {"tpot_ms", percentiles(tpot)}, {"itl_ms", percentiles(itl)}};
    if (!first_error.empty()) j["first_error"] = first_error;
    if (l.health_interval_ms > 0) {
        j["health_ms"] = percentiles(r.health_ms);
        j["health_probes"] = r.health_ms.size();
        j["health_over_50ms"] = std::count_if(r.health_ms.begin(), r.health_ms.end(), [](double ms) { return ms > 50; });
        j["health_failed"] = r.health_failed;
    }
    if (l.idle_sockets > 0) j["idle_sockets"] = {{"opened", r.idle_opened}, {"reopened", r.idle_reopened}};
    if (!rss.empty())
        j["server_rss_mib"] = {{"start", rss.front() / 1024.0}, {"peak", *std::max_element(rss.begin(), rss.end()) / 1024.0},
                               {"end", rss.back() / 1024.0}};
    return j;
}

}  // namespace

int run_bench_serve(BenchServeOptions& o) {
    o.load.model = server_model(o.load);
    std::vector<int64_t> rss;
    std::atomic<bool> sampling{true};
    std::thread rss_thread([&] {
        while (o.server_pid > 0 && sampling) {
            rss.push_back(resident_kib(o.server_pid));
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
        }
    });
    LoadResult result = run_load(o.load);
    sampling = false;
    rss_thread.join();
    json j = report(o, result, rss);
    std::printf("%s\n", o.json ? j.dump().c_str() : j.dump(2).c_str());
    return j["failed"].get<int64_t>() > 0 || result.health_failed > 0 ? 1 : 0;
}

}  // namespace deepinfer::apps
