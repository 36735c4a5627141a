#pragma once
// The OpenAI-compatible HTTP server over one Engine: /v1/completions, /v1/chat/completions (both
// with SSE streaming), /v1/models, /tokenize, /detokenize, /health, /metrics. Connections live on
// an event-driven HttpServer; request bodies are parsed and tokenized on a small worker pool;
// every call feeds the one engine loop and is answered as its events arrive. stop() drains: new
// requests get 503 while in-flight ones finish for up to the grace period, then are cancelled.
#include "server/asio.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "deepinfer/config.h"
#include "deepinfer/engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"

namespace deepinfer::cluster::pd {
class UcxChannel;
}

namespace deepinfer::server {

class CompletionTask;

class OpenAiServer {
public:
    OpenAiServer(Engine& engine, const ServerConfig& config);
    ~OpenAiServer();

    // Binds host:port (port 0 picks a free one); throws deepinfer::Error when it cannot.
    void bind();
    int port() const { return http_->port(); }
    // Serves until stop(); call bind() first.
    void run();
    // Thread-safe; returns once in-flight requests finished or were cancelled.
    void stop();

private:
    void handle(const std::shared_ptr<Exchange>& ex);
    std::optional<HttpResponse> check_head(const HttpRequest& head);
    void handle_completion(const std::shared_ptr<Exchange>& ex, bool chat);
    void start_completion(const std::shared_ptr<Exchange>& ex, const std::string& endpoint, bool chat);
    void submit_completion(const std::shared_ptr<Exchange>& ex, const std::string& endpoint, CompletionCall call,
                           std::chrono::steady_clock::time_point arrival, PdTiming timing = {});
    // Prefill/decode disaggregation (openai_server_pd.cc).
    void start_ucx();
    void handle_prefill(const std::shared_ptr<Exchange>& ex);
    std::string prefill_instance_for(const HttpRequest& req) const;
    void prefill_then_submit(const std::shared_ptr<Exchange>& ex, const std::string& endpoint, CompletionCall call,
                             const std::string& prefill, std::chrono::steady_clock::time_point arrival);
    void handle_tokenizer(const std::shared_ptr<Exchange>& ex, bool encode);
    void reply(const std::shared_ptr<Exchange>& ex, const std::string& endpoint, int status, const nlohmann::json& body);
    void reply_error(const std::shared_ptr<Exchange>& ex, const std::string& endpoint, const ApiError& e);
    ServingInfo serving_info() const;

    Engine& engine_;
    ServerConfig config_;
    Metrics metrics_;
    std::unique_ptr<HttpServer> http_;
    boost::asio::thread_pool workers_;
    std::atomic<bool> draining_{false};
    std::atomic<int64_t> pending_{0};  // completion calls accepted and not yet answered
    std::mutex tasks_mutex_;
    std::unordered_map<uint64_t, std::shared_ptr<CompletionTask>> tasks_;
    std::atomic<uint64_t> next_task_id_{0};
    // Prefill/decode state over UCX (null when UCX could not start: the state then travels in
    // HTTP bodies).
    std::unique_ptr<cluster::pd::UcxChannel> ucx_;
};

}  // namespace deepinfer::server
