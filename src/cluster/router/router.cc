#include "cluster/router/router.h"

#include <chrono>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/logging.h"

namespace deepinfer::cluster {

namespace asio = boost::asio;
using nlohmann::json;
using server::Exchange;
using server::HttpResponse;

namespace {

HttpResponse json_response(int status, const json& body) {
    HttpResponse r;
    r.status = status;
    r.body = body.dump();
    return r;
}

json error_body(const std::string& message) { return {{"error", {{"message", message}, {"type", "server_error"}}}}; }

std::vector<Instance> instances_of(const RouterConfig& c) {
    std::vector<Instance> out;
    auto add = [&](const std::vector<std::string>& urls, InstanceRole role) {
        for (const auto& u : urls) out.push_back({parse_target(u), role});
    };
    add(c.replicas, InstanceRole::kReplica);
    add(c.prefill, InstanceRole::kPrefill);
    add(c.decode, InstanceRole::kDecode);
    DI_CHECK(!c.prefill.empty() == !c.decode.empty(), "the router needs prefill and decode instances together (or neither)");
    DI_CHECK(!out.empty(), "the router needs instances: --replica, or --prefill with --decode");
    DI_CHECK(c.replicas.empty() || c.decode.empty(), "the router routes to replicas or to prefill/decode pairs, not both");
    return out;
}

// What the router keys a call by: its prompt (or messages) as sent, and how much it may generate.
PromptKey call_key(const std::string& body, bool* stream) {
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return {};
    *stream = j.value("stream", false) == true;
    int64_t max_tokens = 0;
    for (const char* f : {"max_tokens", "max_completion_tokens"})
        if (j.contains(f) && j[f].is_number_integer()) max_tokens = j[f].get<int64_t>();
    const char* field = j.contains("messages") ? "messages" : "prompt";
    return j.contains(field) ? prompt_key(j[field].dump(), max_tokens) : PromptKey{};
}

}  // namespace

struct Router::Call {
    std::shared_ptr<Exchange> ex;
    PromptKey key;
    bool stream = false;
    std::unordered_set<int> tried, tried_prefill;
    int attempts = 0, instance = -1, prefill = -1;
    // The instance's reply so far: forwarded once its first data arrives (streams), else kept
    // whole until it ended well.
    int status = 0;
    std::string content_type, body;
    bool sent_to_client = false;
    std::mutex mutex;  // the abort callback runs on another thread
    bool aborted = false;
    std::shared_ptr<HttpClientCall> upstream;
};

Router::Router(RouterConfig config)
    : config_(std::move(config)), pool_(instances_of(config_), config_.cache_weight, config_.prefix_chunks_per_instance) {
    http_ = std::make_unique<server::HttpServer>(
        config_.http, [this](std::shared_ptr<Exchange> ex) { handle(ex); }, [](const server::HttpRequest&) { return std::nullopt; },
        [](const std::string&, int) {});
}

Router::~Router() = default;

void Router::bind() {
    http_->bind();
    health_timer_ = std::make_unique<asio::steady_timer>(http_->io());
    probe_health();
}

void Router::run() { http_->run(); }

void Router::stop() {
    draining_ = true;
    http_->stop_accepting();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(config_.http.shutdown_grace_s);
    while (active_ > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (active_ > 0) spdlog::warn("router: {} calls still running at the end of the grace period", active_.load());
    asio::post(http_->io(), [this] { health_timer_->cancel(); });
    http_->stop();
}

void Router::handle(const std::shared_ptr<Exchange>& ex) {
    const auto& req = ex->request();
    if (req.path == "/health") {
        int healthy = 0;
        for (const auto& i : pool_.snapshot()) healthy += i.healthy;
        bool ok = !draining_ && healthy > 0;
        return ex->respond(json_response(ok ? 200 : 503, {{"status", draining_ ? "shutting down" : ok ? "ok" : "no healthy instance"},
                                                          {"healthy_instances", healthy}}));
    }
    if (req.path == "/metrics") {
        HttpResponse r;
        r.content_type = "text/plain; version=0.0.4";
        r.body = render_metrics();
        return ex->respond(std::move(r));
    }
    if (draining_) return ex->respond(json_response(503, error_body("the router is shutting down")));
    start_call(ex);
}

void Router::start_call(const std::shared_ptr<Exchange>& ex) {
    auto call = std::make_shared<Call>();
    call->ex = ex;
    call->key = call_key(ex->request().body, &call->stream);
    ++active_;
    std::weak_ptr<Call> weak = call;
    ex->on_abort([weak] {
        auto c = weak.lock();
        if (!c) return;
        std::shared_ptr<HttpClientCall> up;
        {
            std::lock_guard<std::mutex> lock(c->mutex);
            c->aborted = true;
            up = c->upstream;
        }
        if (up) up->cancel();
    });
    attempt(call);
}

void Router::attempt(const std::shared_ptr<Call>& call) {
    bool pd = pool_.has_role(InstanceRole::kDecode);
    call->instance = pool_.acquire(pd ? InstanceRole::kDecode : InstanceRole::kReplica, call->key, call->tried);
    call->prefill = -1;
    if (call->instance < 0) {
        ++no_instance_;
        call->ex->respond(json_response(503, error_body("no healthy instance could take the request")));
        return end_call(call, 503);
    }
    ++call->attempts;
    call->tried.insert(call->instance);
    const auto& req = call->ex->request();
    HttpClientRequest up;
    up.method = req.method;
    up.path = req.path;
    up.body = req.body;
    up.idle_timeout_s = config_.request_timeout_s;
    for (const auto& [name, value] : req.headers)
        if (name == "Authorization" || name == "authorization" || name == "Content-Type" || name == "content-type")
            up.headers.emplace_back(name, value);
    // PD: the prefill instance likeliest to hold the prompt; with none healthy the decode
    // instance prefills locally.
    if (pd && (call->prefill = pool_.acquire(InstanceRole::kPrefill, call->key, call->tried_prefill)) >= 0)
        up.headers.emplace_back("X-DeepInfer-Prefill", pool_.snapshot()[static_cast<size_t>(call->prefill)].target.str());
    HttpClientCall::Callbacks cb;
    cb.on_head = [call](int status, const Headers& headers) {
        call->status = status;
        for (const auto& [n, v] : headers)
            if (n == "Content-Type" || n == "content-type") call->content_type = v;
    };
    cb.on_body = [call](std::string_view data) {
        bool sse = call->status == 200 && call->content_type.rfind("text/event-stream", 0) == 0;
        if (!sse) return call->body.append(data), void();
        // Keep-alive comments before the first event are not output: the call can still move.
        if (!call->sent_to_client && data.front() == ':') return;
        if (!call->sent_to_client) {
            HttpResponse head;
            head.content_type = call->content_type;
            head.headers = {{"Cache-Control", "no-cache"}};
            call->ex->start_stream(std::move(head));
            call->sent_to_client = true;
        }
        call->ex->write(std::string(data));
    };
    cb.on_end = [this, call](const std::string& error) { on_upstream_end(call, error); };
    auto started = HttpClientCall::start(http_->io(), pool_.snapshot()[static_cast<size_t>(call->instance)].target, std::move(up), std::move(cb));
    std::lock_guard<std::mutex> lock(call->mutex);
    call->upstream = started;
    if (call->aborted) started->cancel();
}

void Router::on_upstream_end(const std::shared_ptr<Call>& call, const std::string& error) {
    bool aborted;
    {
        std::lock_guard<std::mutex> lock(call->mutex);
        aborted = call->aborted;
        call->upstream.reset();
    }
    bool failed = !error.empty() || call->status >= 500;
    pool_.release(call->instance, call->key, failed && !aborted);
    if (call->prefill >= 0) pool_.release(call->prefill, call->key, false);
    std::string where = pool_.snapshot()[static_cast<size_t>(call->instance)].target.str();
    if (aborted) return end_call(call, 499);
    if (call->sent_to_client) {
        if (!error.empty()) {
            // Mid-stream: what was streamed cannot be taken back; the client learns it broke.
            ++broken_streams_;
            json e = error_body("the instance " + where + " failed mid-stream (" + error + "); the output is incomplete");
            call->ex->write("data: " + e.dump() + "\n\n");
            spdlog::warn("router: a stream from {} broke: {}", where, error);
        }
        call->ex->end_stream();
        return end_call(call, error.empty() ? 200 : 502);
    }
    if (failed && call->attempts < config_.max_attempts && !draining_) {
        spdlog::warn("router: {} failed before answering ({}); retrying elsewhere", where, error.empty() ? "status " + std::to_string(call->status) : error);
        ++retries_;
        call->status = 0;
        call->body.clear();
        call->content_type.clear();
        return attempt(call);
    }
    if (!error.empty()) {
        call->ex->respond(json_response(502, error_body("the instance " + where + " failed: " + error)));
        return end_call(call, 502);
    }
    HttpResponse r;
    r.status = call->status;
    r.content_type = call->content_type.empty() ? "application/json" : call->content_type;
    r.body = std::move(call->body);
    call->ex->respond(std::move(r));
    end_call(call, call->status);
}

void Router::end_call(const std::shared_ptr<Call>&, int status) {
    (status >= 200 && status < 500 ? calls_ok_ : calls_failed_) += 1;
    --active_;
}

void Router::probe_health() {
    auto instances = pool_.snapshot();
    for (size_t i = 0; i < instances.size(); ++i) {
        HttpClientRequest probe;
        probe.path = "/health";
        probe.connect_timeout_s = 2;
        probe.idle_timeout_s = 5;
        http_fetch(http_->io(), instances[i].target, std::move(probe),
                   [this, i](int status, std::string, std::string, Headers) { pool_.set_healthy(static_cast<int>(i), status == 200); });
    }
    health_timer_->expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(config_.health_interval_s)));
    health_timer_->async_wait([this](boost::system::error_code ec) {
        if (!ec && !draining_) probe_health();
    });
}

std::string Router::render_metrics() const {
    std::string out;
    auto counter = [&](const char* name, const char* help, double v) {
        out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
    };
    counter("deepinfer_router_calls_ok_total", "Calls answered with a status below 500.", double(calls_ok_));
    counter("deepinfer_router_calls_failed_total", "Calls answered with an error status (5xx, or cut off).", double(calls_failed_));
    counter("deepinfer_router_retries_total", "Calls moved to another instance after one failed before answering.", double(retries_));
    counter("deepinfer_router_broken_streams_total", "Streams that ended with an error event after their instance failed.",
            double(broken_streams_));
    counter("deepinfer_router_no_instance_total", "Calls refused because no healthy instance was left.", double(no_instance_));
    PoolStats ps = pool_.stats();
    counter("deepinfer_router_prefix_lookup_chunks_total", "Prompt prefix chunks routed.", double(ps.lookup_chunks));
    counter("deepinfer_router_prefix_hit_chunks_total", "Of those, chunks the chosen instance had been sent before (hit rate: over lookups).",
            double(ps.hit_chunks));
    out += "# HELP deepinfer_router_instance_healthy Whether the instance answers its health probe.\n"
           "# TYPE deepinfer_router_instance_healthy gauge\n";
    std::string inflight = "# HELP deepinfer_router_instance_inflight Calls in flight on the instance.\n"
                           "# TYPE deepinfer_router_instance_inflight gauge\n";
    std::string routed = "# HELP deepinfer_router_instance_routed_total Calls sent to the instance.\n"
                         "# TYPE deepinfer_router_instance_routed_total counter\n";
    static const char* roles[] = {"replica", "prefill", "decode"};
    for (const auto& i : pool_.snapshot()) {
        std::string labels = fmt::format("{{instance=\"{}\",role=\"{}\"}}", i.target.str(), roles[static_cast<int>(i.role)]);
        out += fmt::format("deepinfer_router_instance_healthy{} {}\n", labels, i.healthy ? 1 : 0);
        inflight += fmt::format("deepinfer_router_instance_inflight{} {}\n", labels, i.inflight_requests);
        routed += fmt::format("deepinfer_router_instance_routed_total{} {}\n", labels, i.routed);
    }
    return out + inflight + routed;
}

}  // namespace deepinfer::cluster
