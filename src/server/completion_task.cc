#include "server/completion_task.h"

namespace deepinfer::server {

namespace asio = boost::asio;

namespace {

// An SSE comment after this much silence keeps proxies from timing the stream out.
constexpr auto kKeepAliveInterval = std::chrono::seconds(10);

HttpResponse json_response(int status, const nlohmann::json& body) {
    HttpResponse r;
    r.status = status;
    r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return r;
}

}  // namespace

CompletionTask::CompletionTask(asio::io_context& io, std::shared_ptr<Exchange> exchange, std::unique_ptr<CompletionStream> stream,
                               std::function<void(int)> on_end)
    : strand_(asio::make_strand(io)), keepalive_(strand_), exchange_(std::move(exchange)), stream_(std::move(stream)),
      on_end_(std::move(on_end)) {}

void CompletionTask::start() {
    std::weak_ptr<CompletionTask> weak = weak_from_this();
    asio::post(strand_, [self = shared_from_this()] {
        if (self->stream_->streaming()) {
            HttpResponse head;
            head.content_type = "text/event-stream";
            head.headers = {{"Cache-Control", "no-cache"}};
            self->exchange_->start_stream(std::move(head));
            self->arm_keepalive();
        }
    });
    exchange_->on_abort([weak] {
        if (auto self = weak.lock())
            asio::post(self->strand_, [self] {
                self->aborted_ = true;
                self->stream_->cancel();
            });
    });
    stream_->set_listener([weak] {
        if (auto self = weak.lock()) self->schedule_poll();
    });
}

void CompletionTask::cancel() {
    asio::post(strand_, [self = shared_from_this()] { self->stream_->cancel(); });
}

// Engine events arrive once per step per request: one poll in the queue at a time is enough.
void CompletionTask::schedule_poll() {
    if (poll_posted_.exchange(true)) return;
    asio::post(strand_, [self = shared_from_this()] {
        self->poll_posted_ = false;
        self->poll();
    });
}

void CompletionTask::poll() {
    if (ended_) return;
    std::string sse = stream_->poll();
    if (stream_->streaming() && !sse.empty()) {
        exchange_->write(std::move(sse));
        wrote_since_keepalive_ = true;
    }
    if (!stream_->done()) return;
    if (stream_->streaming()) {
        exchange_->end_stream();
        return finish(aborted_ ? 499 : 200);
    }
    auto reply = stream_->response();
    if (auto* err = std::get_if<ApiError>(&reply)) {
        exchange_->respond(json_response(err->status, err->body()));
        return finish(aborted_ ? 499 : err->status);
    }
    exchange_->respond(json_response(200, std::get<nlohmann::json>(reply)));
    finish(aborted_ ? 499 : 200);
}

void CompletionTask::finish(int status) {
    ended_ = true;
    keepalive_.cancel();
    stream_->set_listener(nullptr);
    if (on_end_) on_end_(status);
}

void CompletionTask::arm_keepalive() {
    keepalive_.expires_after(kKeepAliveInterval);
    keepalive_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
        if (ec || self->ended_) return;
        if (!self->wrote_since_keepalive_) self->exchange_->write(": keep-alive\n\n");
        self->wrote_since_keepalive_ = false;
        self->arm_keepalive();
    });
}

}  // namespace deepinfer::server
