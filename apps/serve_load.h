#pragma once
// The load generator behind `deepinfer bench-serve`: streaming /v1/completions requests (random
// token-id prompts, a fixed number of output tokens) kept at a concurrency (closed loop) or sent
// at a Poisson rate (open loop), optionally beside idle half-sent connections and a /health
// probe. Event-driven on one thread (Asio), so thousands of streams cost the client little and
// the timings are the server's.
#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::apps {

struct LoadOptions {
    std::string host = "127.0.0.1", model;
    int port = 8000, concurrency = 1, num_requests = 0, input_len = 128, output_len = 64, vocab = 1000;
    double rate = 0, duration_s = 60;
    uint64_t seed = 0;
    int idle_sockets = 0;          // connections that send half a request line and wait
    int health_interval_ms = 0;    // 0 = no /health probe
};

struct RequestSample {
    bool ok = false;
    std::string error;
    double ttft = 0, e2e = 0;  // seconds
    int tokens = 0;            // delivered (the usage chunk's count)
    std::vector<double> itl;   // seconds between streamed chunks
};

struct LoadResult {
    std::vector<RequestSample> samples;
    double elapsed_s = 0;
    int peak_streams = 0;
    std::vector<double> health_ms;  // latency of each /health probe that got a 200
    int health_failed = 0;
    int idle_opened = 0, idle_reopened = 0;  // reopened: the server closed an idle socket (timeout)
};

// Runs the load until the duration (or request count) is reached and every stream ended.
LoadResult run_load(const LoadOptions& options);

}  // namespace deepinfer::apps
