#pragma once
// Prometheus metrics of the server: request and token counters, latency histograms (time to first
// token, inter-token latency, end-to-end), and gauges read from the engine at scrape time.
// Thread-safe (atomics and a mutex per histogram).
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "deepinfer/engine.h"

namespace deepinfer::server {

class Histogram {
public:
    explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
    void observe(double v);
    void render(std::string& out, const std::string& name, const std::string& help) const;

private:
    std::vector<double> bounds_;
    mutable std::mutex mutex_;
    std::vector<uint64_t> counts_;
    double sum_ = 0;
    uint64_t count_ = 0;
};

// A decode instance's share of a call's time to first token that passed elsewhere: the remote
// prefill, and the transfer of its state (0 for a call prefilled here).
struct PdTiming {
    double prefill_s = 0, transfer_s = 0;
    bool remote() const { return prefill_s > 0 || transfer_s > 0; }
};

// What the server itself knows at scrape time.
struct ServerGauges {
    int64_t active_requests = 0;   // completion calls accepted and not yet answered
    int64_t open_connections = 0;
};

class Metrics {
public:
    Metrics();
    void request_finished(const std::string& endpoint, int status);
    // A request or connection refused by a limit ("body_too_large", "queue_full", ...).
    void rejected(const std::string& reason);
    void tokens(int prompt, int completion);
    // A prefill/decode transfer: "ok", or "failed" (the prompt was then computed locally), over
    // "ucx" or "http" (or "none": the prefill instance's address was unusable).
    void transfer(const std::string& result, const std::string& transport, int64_t bytes, double seconds);
    Histogram ttft, itl, e2e, transfer_seconds, queue_seconds;
    // TTFT split: queue (here), prefill (here, or the remote prefill), transfer (of the state),
    // first decode (here, after a transfer: the window replay and the first token).
    Histogram ttft_queue, ttft_prefill, ttft_transfer, ttft_first_decode;

    std::string render(const EngineStats& stats, const std::string& model, const ServerGauges& server) const;

private:
    mutable std::mutex mutex_;
    std::map<std::pair<std::string, int>, uint64_t> requests_;  // (endpoint, status) -> count
    std::map<std::string, uint64_t> rejected_;                   // reason -> count
    std::map<std::pair<std::string, std::string>, uint64_t> transfers_;  // (result, transport) -> count
    std::atomic<uint64_t> transfer_bytes_{0};
    std::atomic<uint64_t> prompt_tokens_{0}, completion_tokens_{0};
};

}  // namespace deepinfer::server
