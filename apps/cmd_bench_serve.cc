// `deepinfer bench-serve`: a serving load generator for any OpenAI-compatible server. Replays
// streaming /v1/completions requests (random token-id prompts of a fixed length, a fixed number of
// output tokens) either closed-loop at a concurrency or open-loop at a Poisson rate, for a duration
// or a request count, and reports TTFT / TPOT / ITL percentiles, throughput, failures and (with
// --server-pid) the server's resident memory over the run.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "base/error.h"

namespace deepinfer::apps {

void add_bench_serve_command(CLI::App& app, BenchServeOptions& o) {
    auto* cmd = app.add_subcommand("bench-serve", "Load-test an OpenAI-compatible server with streaming requests");
    cmd->add_option("--host", o.host);
    cmd->add_option("--port", o.port)->check(CLI::Range(1, 65535));
    cmd->add_option("--model", o.model, "model name to send (default: the server's first model)");
    cmd->add_option("--concurrency", o.concurrency, "streams in flight (closed loop)")->check(CLI::PositiveNumber);
    cmd->add_option("--rate", o.rate, "requests per second, Poisson arrivals (open loop; overrides --concurrency)");
    cmd->add_option("--duration", o.duration_s, "seconds to keep sending")->check(CLI::PositiveNumber);
    cmd->add_option("--num-requests", o.num_requests, "stop after this many requests (0 = duration only)");
    cmd->add_option("--input-len", o.input_len)->check(CLI::PositiveNumber);
    cmd->add_option("--output-len", o.output_len)->check(CLI::PositiveNumber);
    cmd->add_option("--vocab", o.vocab, "prompt token ids are drawn from [10, vocab)")->check(CLI::PositiveNumber);
    cmd->add_option("--server-pid", o.server_pid, "sample this process's resident memory");
    cmd->add_option("--seed", o.seed);
    cmd->add_flag("--json", o.json);
}

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Sample {
    bool ok = false;
    std::string error;
    double ttft = 0, tpot = 0, e2e = 0;
    int tokens = 0;
    std::vector<double> itl;
};

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

int64_t rss_kib(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string key;
    while (in >> key)
        if (key == "VmRSS:") {
            int64_t v = 0;
            in >> v;
            return v;
        }
    return -1;
}

Sample one_request(const BenchServeOptions& o, const std::string& model, std::mt19937_64& rng) {
    json prompt = json::array();
    for (int i = 0; i < o.input_len; ++i) prompt.push_back(10 + static_cast<int>(rng() % (o.vocab - 10)));
    json body = {{"model", model}, {"prompt", prompt}, {"max_tokens", o.output_len}, {"stream", true},
                 {"ignore_eos", true}, {"temperature", 1.0}, {"seed", rng() % 1000000}};
    httplib::Client client(o.host, o.port);
    client.set_read_timeout(600, 0);
    Sample s;
    auto start = Clock::now();
    Clock::time_point first{}, last{};
    std::string buffer;
    bool done = false;
    int usage_tokens = -1;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        buffer.append(data, n);
        size_t end;
        while ((end = buffer.find("\n\n")) != std::string::npos) {
            std::string event = buffer.substr(0, end);
            buffer.erase(0, end + 2);
            if (event.rfind("data: ", 0) != 0) continue;
            std::string payload = event.substr(6);
            if (payload == "[DONE]") {
                done = true;
                continue;
            }
            json j = json::parse(payload, nullptr, false);
            if (j.contains("usage") && j["usage"].is_object()) usage_tokens = j["usage"]["completion_tokens"].get<int>();
            if (!j.contains("choices") || j["choices"].empty()) continue;
            auto now = Clock::now();
            if (first == Clock::time_point{}) first = now;
            else s.itl.push_back(secs(last, now));
            last = now;
        }
        return true;
    };
    auto res = client.send(req);
    if (!res) s.error = httplib::to_string(res.error());
    else if (res->status != 200) s.error = "HTTP " + std::to_string(res->status) + " " + res->body;
    else if (!done || usage_tokens != o.output_len) s.error = "incomplete stream (" + std::to_string(usage_tokens) + " tokens)";
    s.ok = s.error.empty();
    s.tokens = std::max(usage_tokens, 0);
    s.ttft = secs(start, first);
    s.e2e = secs(start, last);
    s.tpot = s.tokens > 1 ? secs(first, last) / (s.tokens - 1) : 0;
    return s;
}

std::string server_model(const BenchServeOptions& o) {
    if (!o.model.empty()) return o.model;
    httplib::Client c(o.host, o.port);
    auto r = c.Get("/v1/models");
    DI_CHECK(r && r->status == 200, "cannot reach http://{}:{}/v1/models", o.host, o.port);
    return json::parse(r->body)["data"][0]["id"].get<std::string>();
}

}  // namespace

int run_bench_serve(BenchServeOptions& o) {
    std::string model = server_model(o);
    std::vector<Sample> samples;
    std::mutex mutex;
    std::atomic<int> started{0};
    auto start = Clock::now();
    auto deadline = start + std::chrono::duration<double>(o.duration_s);
    auto more = [&] { return Clock::now() < deadline && (o.num_requests == 0 || started < o.num_requests); };
    auto record = [&](Sample s) {
        std::lock_guard<std::mutex> lock(mutex);
        samples.push_back(std::move(s));
    };
    std::vector<int64_t> rss;
    std::atomic<bool> sampling{true};
    std::thread rss_thread([&] {
        while (o.server_pid > 0 && sampling) {
            rss.push_back(rss_kib(o.server_pid));
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
        }
    });
    std::vector<std::thread> workers;
    if (o.rate > 0) {  // open loop: one thread per request, Poisson gaps
        std::mt19937_64 rng(o.seed);
        std::exponential_distribution<double> gap(o.rate);
        while (more()) {
            ++started;
            workers.emplace_back([&, seed = rng()] {
                std::mt19937_64 r(seed);
                record(one_request(o, model, r));
            });
            std::this_thread::sleep_for(std::chrono::duration<double>(gap(rng)));
        }
    } else {
        for (int c = 0; c < o.concurrency; ++c)
            workers.emplace_back([&, c] {
                std::mt19937_64 r(o.seed * 1000003 + c);
                while (more()) {
                    ++started;
                    record(one_request(o, model, r));
                }
            });
    }
    for (auto& w : workers) w.join();
    double elapsed = secs(start, Clock::now());
    sampling = false;
    rss_thread.join();

    std::vector<double> ttft, tpot, itl;
    int64_t tokens = 0, failed = 0;
    std::string first_error;
    for (const auto& s : samples) {
        if (!s.ok) {
            if (failed++ == 0) first_error = s.error;
            continue;
        }
        ttft.push_back(s.ttft * 1e3);
        tpot.push_back(s.tpot * 1e3);
        for (double x : s.itl) itl.push_back(x * 1e3);
        tokens += s.tokens;
    }
    auto pct = [](const std::vector<double>& v) { return json{{"p50", percentile(v, 0.5)}, {"p90", percentile(v, 0.9)}, {"p99", percentile(v, 0.99)}}; };
    json j = {{"model", model}, {"mode", o.rate > 0 ? "rate" : "concurrency"}, {"concurrency", o.concurrency}, {"rate", o.rate},
              {"duration_s", elapsed}, {"requests", samples.size()}, {"failed", failed}, {"input_len", o.input_len},
              {"output_len", o.output_len}, {"requests_per_s", (samples.size() - failed) / elapsed},
              {"output_tokens_per_s", tokens / elapsed}, {"ttft_ms", pct(ttft)}, {"tpot_ms", pct(tpot)}, {"itl_ms", pct(itl)}};
    if (!first_error.empty()) j["first_error"] = first_error;
    if (!rss.empty()) {
        j["server_rss_mib"] = {{"start", rss.front() / 1024.0}, {"peak", *std::max_element(rss.begin(), rss.end()) / 1024.0},
                               {"end", rss.back() / 1024.0}};
    }
    if (o.json) {
        std::printf("%s\n", j.dump().c_str());
    } else {
        std::printf("%s\n", j.dump(2).c_str());
    }
    return failed ? 1 : 0;
}

}  // namespace deepinfer::apps
