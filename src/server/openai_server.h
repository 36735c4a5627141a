#pragma once
// The OpenAI-compatible HTTP server over one Engine: /v1/completions, /v1/chat/completions (both
// with SSE streaming), /v1/models, /health, /metrics. One thread per connection (cpp-httplib's
// pool); all requests feed the one engine loop. stop() drains: new requests get 503 while
// in-flight ones finish for up to the grace period, then are cancelled.
#include <atomic>
#include <memory>
#include <string>

#include "deepinfer/config.h"
#include "deepinfer/engine.h"
#include "server/metrics.h"

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib

namespace deepinfer::server {

class OpenAiServer {
public:
    OpenAiServer(Engine& engine, const ServerConfig& config);
    ~OpenAiServer();

    // Binds host:port (port 0 picks a free one); throws deepinfer::Error when it cannot.
    void bind();
    int port() const { return port_; }
    // Serves until stop(); call bind() first.
    void run();
    // Thread-safe; returns once in-flight requests finished or were cancelled.
    void stop();

private:
    void routes();
    bool authorized(const httplib::Request& req, httplib::Response& res);
    void handle_completion(const httplib::Request& req, httplib::Response& res, bool chat);

    Engine& engine_;
    ServerConfig config_;
    std::unique_ptr<httplib::Server> http_;
    Metrics metrics_;
    std::atomic<bool> draining_{false};
    int port_ = 0;
    int listen_fd_ = -1;
};

}  // namespace deepinfer::server
