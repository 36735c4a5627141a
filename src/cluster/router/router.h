#pragma once
// `deepinfer router`: one OpenAI-compatible front door for several `deepinfer serve` instances.
// Completion calls go to a data-parallel replica chosen cache-aware (InstancePool), or, with
// prefill and decode instances, to a decode instance told which prefill instance computes the
// prompt (header X-DeepInfer-Prefill). A call whose instance fails before anything was sent to the
// client is retried on another; a stream that breaks after its first byte ends with an SSE error
// event (never silently). /health probes every instance; /metrics reports the router's own
// counters; stop() drains.
#include "server/asio.h"

#include <atomic>
#include <memory>
#include <thread>

#include "cluster/router/instance_pool.h"
#include "deepinfer/config.h"
#include "server/http_server.h"

namespace deepinfer::cluster {


struct RouterConfig {
    ServerConfig http;  // the front door's address and connection limits
    std::vector<std::string> replicas, prefill, decode;  // host:port each
    double cache_weight = 1.0;   // prompt tokens likely cached are worth this many tokens of load
    int64_t prefix_chunks_per_instance = 1 << 16;
    int max_attempts = 3;        // instances tried per call before it fails with 503
    double health_interval_s = 1.0;
    double request_timeout_s = 600;  // the longest silence of an instance within a call
};

class Router {
public:
    explicit Router(RouterConfig config);  // throws deepinfer::Error for a bad instance list
    ~Router();
    void bind();
    int port() const { return http_->port(); }
    void run();
    // Thread-safe: refuses new calls, lets running ones finish (grace period), then stops.
    void stop();

private:
    struct Call;
    void handle(const std::shared_ptr<server::Exchange>& ex);
    void start_call(const std::shared_ptr<server::Exchange>& ex);
    void attempt(const std::shared_ptr<Call>& call);
    void on_upstream_end(const std::shared_ptr<Call>& call, const std::string& error);
    void end_call(const std::shared_ptr<Call>& call, int status);
    void probe_health();
    std::string render_metrics() const;

    RouterConfig config_;
    InstancePool pool_;
    std::unique_ptr<server::HttpServer> http_;
    std::unique_ptr<boost::asio::steady_timer> health_timer_;
    std::atomic<bool> draining_{false};
    std::atomic<int64_t> active_{0};
    std::atomic<uint64_t> calls_ok_{0}, calls_failed_{0}, retries_{0}, broken_streams_{0}, no_instance_{0};
};

}  // namespace deepinfer::cluster
