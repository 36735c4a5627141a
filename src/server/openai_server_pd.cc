// The OpenAI server's part in prefill/decode disaggregation: a prefill instance answers
// POST /internal/prefill with a prompt's state; a decode instance fetches that state for each call
// from the prefill instance the request names, imports it, then runs the call as usual (its prompt
// is then a prefix-cache hit). A failed fetch costs only time: the call runs with a local prefill.
#include "server/openai_server.h"

#include <algorithm>

#include "base/logging.h"
#include "cluster/pd/prefill_fetch.h"
#include "cluster/pd/prefill_service.h"

namespace deepinfer::server {

namespace {

// The prefill instance answers once its last UCX send completed: the spans are there or on the
// way, so a short wait covers delivery.
constexpr std::chrono::milliseconds kUcxCollectTimeout{30000};

}  // namespace

void OpenAiServer::handle_prefill(const std::shared_ptr<Exchange>& ex) {
    const std::string endpoint = "/internal/prefill";
    if (config_.role == "decode") return reply_error(ex, endpoint, {403, "this instance's role is decode: it serves no prefills"});
    if (draining_) return reply_error(ex, endpoint, {503, "the server is shutting down", "", "server_error"});
    ++pending_;
    auto begin = std::chrono::steady_clock::now();
    cluster::run_prefill(engine_, ex->request().body, [this, ex, endpoint, begin](cluster::PrefillReply r) {
        HttpResponse response;
        response.status = r.status;
        response.content_type = r.content_type;
        response.body = std::move(r.body);
        response.headers.emplace_back("X-DeepInfer-Spans", std::to_string(r.spans));
        double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
        response.headers.emplace_back("X-DeepInfer-Prefill-Seconds", std::to_string(seconds));
        ex->respond(std::move(response));
        metrics_.request_finished(endpoint, r.status);
        --pending_;
    }, ucx_.get());
}

std::string OpenAiServer::prefill_instance_for(const HttpRequest& req) const {
    if (config_.role == "prefill") return {};
    std::string named = req.header("X-DeepInfer-Prefill");
    return named.empty() ? config_.prefill_instance : named;
}

void OpenAiServer::prefill_then_submit(const std::shared_ptr<Exchange>& ex, const std::string& endpoint, CompletionCall call,
                                       const std::string& prefill, std::chrono::steady_clock::time_point arrival) {
    auto shared_call = std::make_shared<CompletionCall>(std::move(call));
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& r : shared_call->requests) prompts.push_back(r.prompt_tokens);
    auto local = [this, ex, endpoint, shared_call, arrival](PdTiming timing = {}) {
        submit_completion(ex, endpoint, std::move(*shared_call), arrival, timing);
    };
    // State travels in whole prefix-cache spans: a call whose prompts are all shorter than one has
    // nothing to fetch, and asking would only compute its prompt twice.
    int64_t span = engine_.stats().prefix_cache.span_tokens;
    if (std::none_of(prompts.begin(), prompts.end(), [span](const auto& p) { return static_cast<int64_t>(p.size()) >= span; })) {
        metrics_.transfer("skipped", "none", 0, 0);
        return local();
    }
    cluster::HttpTarget target;
    try {
        target = cluster::parse_target(prefill);
    } catch (const std::exception& e) {
        spdlog::warn("prefill instance '{}' is not usable ({}): prefilling locally", prefill, e.what());
        metrics_.transfer("failed", "none", 0, 0);
        return local();
    }
    auto on_transfer = [this, local, prefill](cluster::PrefillTransfer t) {
        // Collecting UCX spans may wait, importing checks every span's checksum: off the I/O threads.
        boost::asio::post(workers_, [this, local, prefill, t = std::move(t)]() mutable {
            if (t.error.empty() && t.transport == "ucx") cluster::collect_ucx(t, *ucx_, kUcxCollectTimeout);
            if (!t.error.empty()) {
                spdlog::warn("prefill from {} failed ({}): prefilling locally", prefill, t.error);
                metrics_.transfer("failed", t.transport, t.bytes, t.seconds());
                return local();
            }
            size_t spans = t.spans.size();
            int accepted = engine_.import_prefix_spans(std::move(t.spans));
            metrics_.transfer("ok", t.transport, t.bytes, t.seconds());
            double mb_per_s = t.seconds() > 0 ? static_cast<double>(t.bytes) / t.seconds() / 1e6 : 0;
            engine_.trace_span("pd transfer", t.begin, t.end,
                               {{"bytes", static_cast<double>(t.bytes)}, {"spans", static_cast<double>(spans)},
                                {"ucx", t.transport == "ucx" ? 1.0 : 0.0},
                                {"accepted", static_cast<double>(accepted)}, {"MB_per_s", mb_per_s},
                                {"remote_prefill_s", t.prefill_seconds}});
            local({t.prefill_seconds, std::max(0.0, t.seconds() - t.prefill_seconds)});
        });
    };
    // UCX unless this instance has none or the request asks for the state in the HTTP body.
    bool use_ucx = ucx_ != nullptr && ex->request().header("X-DeepInfer-Transport") != "http";
    cluster::fetch_prefill(http_->io(), target, prompts, config_.prefill_timeout_s, use_ucx ? ucx_.get() : nullptr, std::move(on_transfer));
}

}  // namespace deepinfer::server
