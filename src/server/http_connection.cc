#include "server/http_connection.h"

#include <fmt/format.h>

#include <mutex>

namespace deepinfer::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using beast::error_code;

namespace {

// Bytes a client may send ahead (pipelining) while its request is being answered; past this the
// connection stops reading until the reply is done.
constexpr size_t kMaxReadAhead = 64 << 10;
// Reply bytes waiting for a client that does not read; past this the connection is dropped.
constexpr size_t kMaxUnsentBytes = 16 << 20;
// After the last reply of a connection, how long unread input is drained before closing, so the
// client sees the reply rather than a reset.
constexpr double kLingerSeconds = 2.0;

std::string error_body(const std::string& message, int status, const std::string& type) {
    return fmt::format(R"({{"error":{{"message":"{}","type":"{}","param":null,"code":{}}}}})", message, type, status);
}

}  // namespace

// The handler's side of one request. Its calls post to the connection's strand, where the
// connection checks that the exchange is still the current one.
class HttpExchange final : public Exchange {
public:
    HttpExchange(std::weak_ptr<HttpConnection> connection, HttpConnection::Socket::executor_type executor, HttpRequest request)
        : connection_(std::move(connection)), executor_(std::move(executor)), request_(std::move(request)) {}

    const HttpRequest& request() const override { return request_; }
    void respond(HttpResponse response) override {
        post([r = std::move(response)](HttpConnection& c, const HttpExchange* ex) mutable { c.send_response(ex, std::move(r)); });
    }
    void start_stream(HttpResponse head) override {
        post([h = std::move(head)](HttpConnection& c, const HttpExchange* ex) mutable { c.send_stream_head(ex, std::move(h)); });
    }
    void write(std::string data) override {
        post([d = std::move(data)](HttpConnection& c, const HttpExchange* ex) mutable { c.send_stream_data(ex, std::move(d)); });
    }
    void end_stream() override {
        post([](HttpConnection& c, const HttpExchange* ex) { c.send_stream_end(ex); });
    }
    void on_abort(std::function<void()> callback) override {
        std::unique_lock<std::mutex> lock(mutex_);
        if (!aborted_) {
            on_abort_ = std::move(callback);
            return;
        }
        lock.unlock();
        if (callback) callback();
    }

    // Connection side (strand).
    void abort() {
        std::function<void()> callback;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (aborted_ || completed_) return;
            aborted_ = true;
            callback = std::move(on_abort_);
        }
        if (callback) callback();
    }
    void complete() {
        std::lock_guard<std::mutex> lock(mutex_);
        completed_ = true;
        on_abort_ = nullptr;
    }

private:
    template <typename F>
    void post(F&& f) {
        asio::post(executor_, [c = connection_, self = this, f = std::forward<F>(f)]() mutable {
            if (auto conn = c.lock()) f(*conn, self);
        });
    }

    std::weak_ptr<HttpConnection> connection_;
    HttpConnection::Socket::executor_type executor_;
    HttpRequest request_;
    std::mutex mutex_;
    std::function<void()> on_abort_;
    bool aborted_ = false, completed_ = false;
};

HttpConnection::HttpConnection(Socket socket, HttpServer& server)
    : socket_(std::move(socket)), server_(server), read_timer_(socket_.get_executor()), write_timer_(socket_.get_executor()) {}

void HttpConnection::start() {
    arm_read_timer(server_.config_.header_timeout_s);
    read_header();
}

void HttpConnection::start_refused(int status, const std::string& message) {
    version_ = 11;
    refuse(status, "too_many_connections", message);
}

void HttpConnection::close() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->do_close(); });
}

void HttpConnection::close_if_idle() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
        if (self->state_ != State::kHandling) self->do_close();
    });
}

// --- reading ---------------------------------------------------------------------------------

void HttpConnection::read_header() {
    state_ = State::kReading;
    busy_ = false;
    waiting_since_ = std::chrono::steady_clock::now().time_since_epoch().count();
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(server_.config_.max_header_bytes));
    parser_->body_limit(static_cast<uint64_t>(server_.config_.max_body_bytes));
    http::async_read_header(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
}

void HttpConnection::on_header(error_code ec) {
    if (state_ == State::kClosed) return;
    if (ec) return refuse_parse_error(ec);
    const auto& msg = parser_->get();
    version_ = msg.version() == 10 ? 10 : 11;
    keep_alive_ = parser_->keep_alive();
    HttpRequest head;
    head.method = std::string(msg.method_string());
    std::string target(msg.target());
    head.path = target.substr(0, target.find('?'));
    head.version = version_;
    for (const auto& f : msg) head.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    if (static_cast<int>(head.headers.size()) > server_.config_.max_header_count)
        return refuse(431, "too_many_headers",
                      fmt::format("a request may carry at most {} header fields", server_.config_.max_header_count));
    if (server_.check_)
        if (auto refusal = server_.check_(head)) {
            keep_alive_ = false;
            return send_response(nullptr, std::move(*refusal));
        }
    if (beast::iequals(msg[http::field::expect], "100-continue") && version_ == 11)
        enqueue("HTTP/1.1 100 Continue\r\n\r\n", false);
    arm_read_timer(server_.config_.body_timeout_s);
    read_body();
}

void HttpConnection::read_body() {
    http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
}

void HttpConnection::on_body(error_code ec) {
    if (state_ == State::kClosed) return;
    if (ec) return refuse_parse_error(ec);
    read_timer_.cancel();
    dispatch();
}

void HttpConnection::refuse_parse_error(error_code ec) {
    if (ec == asio::error::operation_aborted) return;  // the read timer or a close ended the read
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset) return do_close();
    if (ec == http::error::header_limit)
        return refuse(431, "header_too_large",
                      fmt::format("request headers exceed {} bytes", server_.config_.max_header_bytes));
    if (ec == http::error::body_limit)
        return refuse(413, "body_too_large", fmt::format("request body exceeds {} bytes", server_.config_.max_body_bytes));
    refuse(400, "malformed_request", "malformed HTTP request: " + ec.message());
}

void HttpConnection::dispatch() {
    HttpRequest request;
    const auto& msg = parser_->get();
    request.method = std::string(msg.method_string());
    std::string target(msg.target());
    request.path = target.substr(0, target.find('?'));
    request.version = version_;
    for (const auto& f : msg) request.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    request.body = std::move(parser_->get().body());
    parser_.reset();
    state_ = State::kHandling;
    busy_ = true;
    last_queued_ = false;
    exchange_ = std::make_shared<HttpExchange>(weak_from_this(), socket_.get_executor(), std::move(request));
    watch();
    server_.handler_(exchange_);
}

// While a request is being answered (and between requests) one read stays open: it notices a
// client that hung up, and keeps bytes a client sent ahead for the next request.
void HttpConnection::watch() {
    if (watching_ || buffer_.size() >= kMaxReadAhead) return;
    watching_ = true;
    socket_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](error_code ec, size_t n) { self->on_watch(ec, n); });
}

void HttpConnection::on_watch(error_code ec, size_t n) {
    watching_ = false;
    if (state_ == State::kClosed || state_ == State::kLingering) return;
    if (ec && ec != asio::error::operation_aborted) return do_close();  // the client went away: abort
    if (!ec) buffer_.commit(n);
    if (state_ == State::kHandling) {
        if (!ec) watch();
        return;
    }
    if (state_ == State::kIdle) next_request();  // the reply finished meanwhile
}

void HttpConnection::next_request() {
    arm_read_timer(buffer_.size() > 0 ? server_.config_.header_timeout_s : server_.config_.idle_timeout_s);
    read_header();
}

void HttpConnection::arm_read_timer(double seconds) {
    read_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds)));
    // A wait that already expired is not cancelled by re-arming: the generation tells it is stale.
    read_timer_.async_wait([self = shared_from_this(), generation = ++read_generation_](error_code ec) {
        if (!ec && generation == self->read_generation_) self->on_read_timeout();
    });
}

// A header or body that did not arrive in time gets 408; a connection that sent nothing (new
// or kept alive) is closed quietly.
void HttpConnection::on_read_timeout() {
    if (state_ == State::kLingering) return do_close();
    if (state_ != State::kReading) return;
    bool started = buffer_.size() > 0 || (parser_ && parser_->is_header_done());
    if (!started) return do_close();
    error_code ignored;
    socket_.cancel(ignored);  // ends the pending read; its handler sees operation_aborted
    const char* reason = parser_ && parser_->is_header_done() ? "body_timeout" : "header_timeout";
    refuse(408, reason, std::string("the request did not arrive in time (") + reason + ")");
}

// --- writing ---------------------------------------------------------------------------------

std::string HttpConnection::status_line(int status) const {
    return fmt::format("HTTP/1.{} {} {}\r\n", version_ == 10 ? 0 : 1, status,
                       std::string(http::obsolete_reason(static_cast<http::status>(status))));
}

void HttpConnection::refuse(int status, const std::string& reason, const std::string& message) {
    if (server_.on_reject_) server_.on_reject_(reason, status);
    keep_alive_ = false;
    HttpResponse r;
    r.status = status;
    r.body = error_body(message, status, status == 503 ? "server_error" : "invalid_request_error");
    send_response(nullptr, std::move(r));
}

void HttpConnection::send_response(const HttpExchange* ex, HttpResponse r) {
    if (ex != exchange_.get() || state_ == State::kClosed || last_queued_) return;
    bool keep = keep_alive_ && server_.accepting_;
    std::string out = status_line(r.status);
    out += fmt::format("Content-Type: {}\r\nContent-Length: {}\r\n", r.content_type, r.body.size());
    out += keep ? (version_ == 10 ? "Connection: keep-alive\r\n" : "") : "Connection: close\r\n";
    for (const auto& [k, v] : r.headers) out += k + ": " + v + "\r\n";
    out += "\r\n";
    out += r.body;
    keep_alive_ = keep;
    enqueue(std::move(out), true);
}

void HttpConnection::send_stream_head(const HttpExchange* ex, HttpResponse head) {
    if (ex != exchange_.get() || !ex || state_ == State::kClosed || last_queued_) return;
    chunked_ = version_ == 11;
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the body ends when the connection does
    std::string out = status_line(head.status);
    out += "Content-Type: " + head.content_type + "\r\n";
    out += chunked_ ? "Transfer-Encoding: chunked\r\n" : "Connection: close\r\n";
    for (const auto& [k, v] : head.headers) out += k + ": " + v + "\r\n";
    out += "\r\n";
    enqueue(std::move(out), false);
}

void HttpConnection::send_stream_data(const HttpExchange* ex, std::string data) {
    if (ex != exchange_.get() || !ex || state_ == State::kClosed || last_queued_ || data.empty()) return;
    if (chunked_) data = fmt::format("{:x}\r\n", data.size()) + data + "\r\n";
    enqueue(std::move(data), false);
}

void HttpConnection::send_stream_end(const HttpExchange* ex) {
    if (ex != exchange_.get() || !ex || state_ == State::kClosed || last_queued_) return;
    if (!server_.accepting_) keep_alive_ = false;
    enqueue(chunked_ ? "0\r\n\r\n" : "", true);
}

void HttpConnection::enqueue(std::string bytes, bool last) {
    if (last) last_queued_ = true;
    outbox_bytes_ += bytes.size();
    outbox_.push_back(std::move(bytes));
    if (outbox_bytes_ > kMaxUnsentBytes) return do_close();  // the client does not read its replies
    if (!writing_) write_next();
}

void HttpConnection::write_next() {
    if (outbox_.empty()) {
        if (last_queued_) finish_reply();
        return;
    }
    writing_ = true;
    write_timer_.expires_after(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(server_.config_.write_timeout_s)));
    write_timer_.async_wait([self = shared_from_this()](error_code ec) {
        if (!ec) self->do_close();  // the client stopped reading
    });
    asio::async_write(socket_, asio::buffer(outbox_.front()), [self = shared_from_this()](error_code ec, size_t) {
        self->writing_ = false;
        self->write_timer_.cancel();
        if (self->state_ == State::kClosed) return;
        if (ec) return self->do_close();
        self->outbox_bytes_ -= self->outbox_.front().size();
        self->outbox_.pop_front();
        self->write_next();
    });
}

// The reply is out: the connection waits for the next request, or closes.
void HttpConnection::finish_reply() {
    if (exchange_) exchange_->complete();
    exchange_.reset();
    last_queued_ = false;
    chunked_ = false;
    if (!keep_alive_ || !server_.accepting_) return linger_and_close();
    state_ = State::kIdle;
    if (!watching_) return next_request();
    error_code ignored;
    socket_.cancel(ignored);  // ends the watching read (nothing else is pending); on_watch goes on
}

void HttpConnection::linger_and_close() {
    state_ = State::kLingering;
    error_code ignored;
    socket_.shutdown(Socket::shutdown_send, ignored);
    arm_read_timer(kLingerSeconds);
    drain();
}

void HttpConnection::drain() {
    discard_.resize(4096);
    socket_.async_read_some(asio::buffer(discard_), [self = shared_from_this()](error_code ec, size_t) {
        if (ec) return self->do_close();
        self->drain();  // until the client closes or the linger timer fires
    });
}

void HttpConnection::do_close() {
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    error_code ignored;
    read_timer_.cancel();
    write_timer_.cancel();
    socket_.shutdown(Socket::shutdown_both, ignored);
    socket_.close(ignored);
    if (exchange_) exchange_->abort();
    exchange_.reset();
    outbox_.clear();
    server_.untrack(this);
}

}  // namespace deepinfer::server
