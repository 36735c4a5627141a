#include "server/openai_server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "base/error.h"
#include "base/logging.h"
#include "server/completion_stream.h"
#include "server/openai_protocol.h"

namespace deepinfer::server {
namespace {

using nlohmann::json;

void send_json(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, e.body()); }

// While a stream has nothing to send, an SSE comment every so often finds out whether the client
// is still there (a failed write cancels the request).
constexpr auto kKeepAliveInterval = std::chrono::milliseconds(1000);
constexpr auto kPollInterval = std::chrono::milliseconds(50);

}  // namespace

OpenAiServer::OpenAiServer(Engine& engine, const ServerConfig& config)
    : engine_(engine), config_(config), http_(std::make_unique<httplib::Server>()) {
    int threads = std::max(8, config.max_connections);
    http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    // cpp-httplib listens with a backlog of 5, so a burst of clients connecting at once overflows
    // the accept queue and some get reset; keep the socket to listen again with a deep backlog.
    http_->set_socket_options([this](int fd) {
        int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        listen_fd_ = fd;
    });
    http_->set_read_timeout(std::chrono::seconds(60));
    http_->set_write_timeout(std::chrono::seconds(10));
    routes();
}

OpenAiServer::~OpenAiServer() = default;

void OpenAiServer::bind() {
    port_ = config_.port == 0 ? http_->bind_to_any_port(config_.host) : (http_->bind_to_port(config_.host, config_.port) ? config_.port : -1);
    DI_CHECK(port_ > 0, "cannot listen on {}:{}", config_.host, config_.port);
    if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
}

void OpenAiServer::run() {
    spdlog::info("serving {} on http://{}:{}", engine_.model_name(), config_.host, port_);
    http_->listen_after_bind();
}

void OpenAiServer::stop() {
    draining_ = true;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(config_.shutdown_grace_s);
    while (metrics_.active_requests > 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (metrics_.active_requests > 0) {
        spdlog::warn("shutdown: cancelling {} requests still running", metrics_.active_requests.load());
        engine_.shutdown(/*cancel_running=*/true);
    }
    http_->stop();
}

bool OpenAiServer::authorized(const httplib::Request& req, httplib::Response& res) {
    if (config_.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + config_.api_key) return true;
    send_error(res, {401, "invalid or missing API key", "", "authentication_error"});
    return false;
}

void OpenAiServer::routes() {
    auto& s = *http_;
    s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        send_json(res, draining_ ? 503 : 200, {{"status", draining_ ? "shutting down" : "ok"}});
    });
    s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(metrics_.render(engine_.stats(), engine_.model_name()), "text/plain; version=0.0.4");
    });
    s.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
        if (!authorized(req, res)) return;
        send_json(res, 200, {{"object", "list"},
                             {"data", {{{"id", engine_.model_name()}, {"object", "model"}, {"created", 0},
                                        {"owned_by", "deepinfer"}, {"max_model_len", engine_.max_model_len()}}}}});
    });
    s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { handle_completion(req, res, false); });
    s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { handle_completion(req, res, true); });
    s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        std::string msg = res.status == 404 ? "no route for " + req.method + " " + req.path : "HTTP error";
        send_error(res, {res.status, msg, "", res.status == 404 ? "not_found_error" : "invalid_request_error"});
    });
    s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string msg = "internal error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            msg = e.what();
        } catch (...) {
        }
        send_error(res, {500, msg, "", "server_error"});
    });
}

void OpenAiServer::handle_completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    std::string endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
    if (!authorized(req, res)) return metrics_.request_finished(endpoint, 401);
    if (draining_) {
        send_error(res, {503, "the server is shutting down", "", "server_error"});
        return metrics_.request_finished(endpoint, 503);
    }
    ServingInfo info{engine_.model_name(), engine_.vocab_size(), engine_.max_model_len()};
    auto tokenize = [this](const std::string& text, bool special) { return engine_.tokenize(text, special); };
    auto parsed = parse_completion_call(req.body, chat, info, tokenize);
    if (auto* err = std::get_if<ApiError>(&parsed)) {
        send_error(res, *err);
        return metrics_.request_finished(endpoint, err->status);
    }
    CompletionCall call = std::move(std::get<CompletionCall>(parsed));
    if (!call.stream) {
        CompletionStream stream(engine_, std::move(call), metrics_);
        json body = stream.collect();
        if (!stream.error().empty()) {
            send_error(res, {500, stream.error(), "", "server_error"});
            return metrics_.request_finished(endpoint, 500);
        }
        send_json(res, 200, body);
        return metrics_.request_finished(endpoint, 200);
    }
    auto stream = std::make_shared<CompletionStream>(engine_, std::move(call), metrics_);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [stream, last_write = std::chrono::steady_clock::now()](size_t, httplib::DataSink& sink) mutable {
            std::string data = stream->next_sse(kPollInterval);
            auto now = std::chrono::steady_clock::now();
            if (data.empty() && now - last_write >= kKeepAliveInterval) data = ": keep-alive\n\n";
            if (!data.empty()) {
                last_write = now;
                if (!sink.write(data.data(), data.size())) {  // client gone: free its request
                    stream->cancel();
                    return false;
                }
            }
            if (stream->done()) sink.done();
            return true;
        },
        [this, endpoint, stream](bool success) {
            if (!stream->done()) stream->cancel();
            metrics_.request_finished(endpoint, success ? 200 : 499);
        });
}

}  // namespace deepinfer::server
