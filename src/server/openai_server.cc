#include "server/openai_server.h"

#include <chrono>
#include <thread>

#include "base/error.h"
#include "base/logging.h"
#include "cluster/pd/ucx_channel.h"
#include "server/completion_task.h"

namespace deepinfer::server {
namespace {

using nlohmann::json;

HttpResponse json_response(int status, const json& body) {
    HttpResponse r;
    r.status = status;
    r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
    return r;
}

// Equal strings compare in time that depends only on their lengths, not on where they differ.
bool constant_time_equal(const std::string& a, const std::string& b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % std::max<size_t>(b.size(), 1)]);
    return diff == 0;
}

bool needs_key(const std::string& path) {
    return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize" || path == "/internal/prefill";
}

// The endpoint label of the metrics: known routes by name, everything else as one label.
std::string endpoint_label(const std::string& path) {
    for (const char* known : {"/health", "/metrics", "/v1/models", "/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize",
                              "/internal/prefill"})
        if (path == known) return path;
    return path.rfind("/v1/models/", 0) == 0 ? "/v1/models" : "other";
}

}  // namespace

OpenAiServer::OpenAiServer(Engine& engine, const ServerConfig& config)
    : engine_(engine), config_(config), workers_(static_cast<size_t>(std::max(1, config.worker_threads))) {
    http_ = std::make_unique<HttpServer>(
        config_, [this](std::shared_ptr<Exchange> ex) { handle(ex); }, [this](const HttpRequest& head) { return check_head(head); },
        [this](const std::string& reason, int status) {
            metrics_.rejected(reason);
            if (status > 0) metrics_.request_finished("other", status);
        });
    start_ucx();
}

OpenAiServer::~OpenAiServer() { workers_.join(); }

void OpenAiServer::start_ucx() {
    try {
        ucx_ = std::make_unique<cluster::pd::UcxChannel>();
    } catch (const std::exception& e) {
        spdlog::warn("UCX did not start ({}): prefill state will travel in HTTP bodies", e.what());
    }
}

void OpenAiServer::bind() { http_->bind(); }

void OpenAiServer::run() {
    spdlog::info("serving {} on http://{}:{}", engine_.model_name(), config_.host, port());
    http_->run();
}

void OpenAiServer::stop() {
    draining_ = true;
    http_->stop_accepting();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(config_.shutdown_grace_s);
    while (pending_ > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (pending_ > 0) {
        spdlog::warn("shutdown: cancelling {} requests still running", pending_.load());
        std::vector<std::shared_ptr<CompletionTask>> running;
        {
            std::lock_guard<std::mutex> lock(tasks_mutex_);
            for (auto& [p, t] : tasks_) running.push_back(t);
        }
        for (auto& t : running) t->cancel();
        // Cancelled calls end within a step; their replies (an error event) go out before the close.
        auto last = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (pending_ > 0 && std::chrono::steady_clock::now() < last) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    http_->stop();
}

std::optional<HttpResponse> OpenAiServer::check_head(const HttpRequest& head) {
    if (config_.api_key.empty() || !needs_key(head.path)) return std::nullopt;
    if (constant_time_equal(head.header("Authorization"), "Bearer " + config_.api_key)) return std::nullopt;
    metrics_.request_finished(endpoint_label(head.path), 401);
    return json_response(401, ApiError{401, "invalid or missing API key", "", "authentication_error"}.body());
}

ServingInfo OpenAiServer::serving_info() const {
    return {engine_.model_name(),          engine_.vocab_size(),      engine_.max_model_len(),
            config_.max_sequences_per_request, config_.max_json_depth, engine_.deterministic_available()};
}

void OpenAiServer::reply(const std::shared_ptr<Exchange>& ex, const std::string& endpoint, int status, const json& body) {
    ex->respond(json_response(status, body));
    metrics_.request_finished(endpoint, status);
}

void OpenAiServer::reply_error(const std::shared_ptr<Exchange>& ex, const std::string& endpoint, const ApiError& e) {
    if (!e.reason.empty()) metrics_.rejected(e.reason);
    reply(ex, endpoint, e.status, e.body());
}

void OpenAiServer::handle(const std::shared_ptr<Exchange>& ex) {
    const HttpRequest& req = ex->request();
    const std::string& path = req.path;
    std::string endpoint = endpoint_label(path);
    bool get = req.method == "GET", post = req.method == "POST";
    auto wrong_method = [&](const char* allow) {
        HttpResponse r = json_response(405, ApiError{405, "method " + req.method + " is not allowed on " + path + " (use " + allow + ")"}.body());
        r.headers.emplace_back("Allow", allow);
        ex->respond(std::move(r));
        metrics_.request_finished(endpoint, 405);
    };
    if (path == "/health") {
        if (!get) return wrong_method("GET");
        return reply(ex, endpoint, draining_ ? 503 : 200, {{"status", draining_ ? "shutting down" : "ok"}});
    }
    if (path == "/metrics") {
        if (!get) return wrong_method("GET");
        HttpResponse r;
        r.content_type = "text/plain; version=0.0.4";
        r.body = metrics_.render(engine_.stats(), engine_.model_name(), {pending_.load(), http_->open_connections()});
        ex->respond(std::move(r));
        return metrics_.request_finished(endpoint, 200);
    }
    if (path == "/v1/models" || path == "/v1/models/" + engine_.model_name()) {
        if (!get) return wrong_method("GET");
        json model = {{"id", engine_.model_name()}, {"object", "model"}, {"created", 0}, {"owned_by", "deepinfer"},
                      {"max_model_len", engine_.max_model_len()}};
        return reply(ex, endpoint, 200, path == "/v1/models" ? json{{"object", "list"}, {"data", json::array({model})}} : model);
    }
    if (path == "/v1/completions" || path == "/v1/chat/completions") {
        if (!post) return wrong_method("POST");
        return handle_completion(ex, path == "/v1/chat/completions");
    }
    if (path == "/internal/prefill") {
        if (!post) return wrong_method("POST");
        return handle_prefill(ex);
    }
    if (path == "/tokenize" || path == "/detokenize") {
        if (!post) return wrong_method("POST");
        return handle_tokenizer(ex, path == "/tokenize");
    }
    reply(ex, endpoint, 404, ApiError{404, "no route for " + req.method + " " + path, "", "not_found_error"}.body());
}

void OpenAiServer::handle_tokenizer(const std::shared_ptr<Exchange>& ex, bool encode) {
    boost::asio::post(workers_, [this, ex, encode] {
        std::string endpoint = encode ? "/tokenize" : "/detokenize";
        auto tokenize = [this](const std::string& text, bool special) { return engine_.tokenize(text, special); };
        auto detokenize = [this](const std::vector<int32_t>& ids) { return engine_.detokenize(ids, false); };
        auto out = encode ? tokenize_request(ex->request().body, serving_info(), tokenize)
                          : detokenize_request(ex->request().body, serving_info(), detokenize);
        if (auto* err = std::get_if<ApiError>(&out)) return reply_error(ex, endpoint, *err);
        reply(ex, endpoint, 200, std::get<json>(out));
    });
}

void OpenAiServer::handle_completion(const std::shared_ptr<Exchange>& ex, bool chat) {
    std::string endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
    if (draining_) return reply_error(ex, endpoint, {503, "the server is shutting down", "", "server_error"});
    if (++pending_ > config_.max_pending_requests) {
        --pending_;
        ApiError busy{429, "too many requests in flight (" + std::to_string(config_.max_pending_requests) + "); try again later", "",
                      "rate_limit_error", "queue_full"};
        metrics_.rejected(busy.reason);
        HttpResponse r = json_response(429, busy.body());
        r.headers.emplace_back("Retry-After", "1");
        ex->respond(std::move(r));
        return metrics_.request_finished(endpoint, 429);
    }
    // Parsing tokenizes the prompt: off the I/O threads.
    boost::asio::post(workers_, [this, ex, endpoint, chat] { start_completion(ex, endpoint, chat); });
}

void OpenAiServer::start_completion(const std::shared_ptr<Exchange>& ex, const std::string& endpoint, bool chat) {
    auto arrival = std::chrono::steady_clock::now();
    auto tokenize = [this](const std::string& text, bool special) { return engine_.tokenize(text, special); };
    auto check_grammar = [this](const GrammarSpec& g) { return engine_.check_grammar(g); };
    auto parsed = parse_completion_call(ex->request().body, chat, serving_info(), tokenize, check_grammar);
    if (auto* err = std::get_if<ApiError>(&parsed)) {
        --pending_;
        return reply_error(ex, endpoint, *err);
    }
    if (draining_) {
        --pending_;
        return reply_error(ex, endpoint, {503, "the server is shutting down", "", "server_error"});
    }
    std::string prefill = prefill_instance_for(ex->request());
    if (!prefill.empty()) return prefill_then_submit(ex, endpoint, std::move(std::get<CompletionCall>(parsed)), prefill, arrival);
    submit_completion(ex, endpoint, std::move(std::get<CompletionCall>(parsed)), arrival);
}

void OpenAiServer::submit_completion(const std::shared_ptr<Exchange>& ex, const std::string& endpoint, CompletionCall call,
                                     std::chrono::steady_clock::time_point arrival, PdTiming timing) {
    auto stream = std::make_unique<CompletionStream>(engine_, std::move(call), metrics_);
    stream->set_arrival(arrival, timing);
    uint64_t id = ++next_task_id_;
    auto on_end = [this, endpoint, id](int status) {
        metrics_.request_finished(endpoint, status);
        {
            std::lock_guard<std::mutex> lock(tasks_mutex_);
            tasks_.erase(id);
        }
        --pending_;
    };
    auto task = std::make_shared<CompletionTask>(http_->io(), ex, std::move(stream), std::move(on_end));
    {
        std::lock_guard<std::mutex> lock(tasks_mutex_);
        tasks_[id] = task;
    }
    task->start();
}

}  // namespace deepinfer::server
