#include "apps/serve_load.h"

#include <sys/socket.h>

#include <chrono>
#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <memory>
#include <random>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/process.h"
#include "server/asio.h"

namespace deepinfer::apps {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// One HTTP/1.1 exchange over a fresh connection ("Connection: close"): the response head, then
// the body de-chunked and handed to `on_body` as it arrives; `on_end(status, error)` at the end.
class HttpCall : public std::enable_shared_from_this<HttpCall> {
public:
    using OnBody = std::function<void(const std::string&)>;
    using OnEnd = std::function<void(int status, const std::string& error)>;
    HttpCall(asio::io_context& io, std::string request, OnBody on_body, OnEnd on_end)
        : socket_(io), request_(std::move(request)), on_body_(std::move(on_body)), on_end_(std::move(on_end)) {}

    void start(const tcp::endpoint& ep) {
        socket_.async_connect(ep, [self = shared_from_this()](boost::system::error_code ec) {
            if (ec) return self->end("connect: " + ec.message());
            asio::async_write(self->socket_, asio::buffer(self->request_), [self](boost::system::error_code e, size_t) {
                if (e) return self->end("write: " + e.message());
                self->read();
            });
        });
    }

private:
    void read() {
        socket_.async_read_some(asio::buffer(buf_), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
            if (n > 0) self->take(std::string(self->buf_.data(), n));
            if (ec) return self->end(ec == asio::error::eof ? "" : "read: " + ec.message());
            self->read();
        });
    }

    void take(std::string data) {
        if (status_ == 0) {
            head_ += data;
            size_t end = head_.find("\r\n\r\n");
            if (end == std::string::npos) return;
            status_ = head_.size() > 12 ? std::atoi(head_.c_str() + 9) : -1;
            chunked_ = head_.substr(0, end).find("chunked") != std::string::npos;
            data = head_.substr(end + 4);
        }
        if (!chunked_) return on_body_(data);
        pending_ += data;
        dechunk();
    }

    // Hands on every complete chunk in pending_.
    void dechunk() {
        for (;;) {
            size_t eol = pending_.find("\r\n");
            if (eol == std::string::npos) return;
            size_t size = std::strtoul(pending_.c_str(), nullptr, 16);
            if (pending_.size() < eol + 2 + size + 2) return;
            if (size > 0) on_body_(pending_.substr(eol + 2, size));
            pending_.erase(0, eol + 2 + size + 2);
        }
    }

    void end(const std::string& error) {
        if (!on_end_) return;
        boost::system::error_code ignored;
        socket_.close(ignored);
        auto f = std::move(on_end_);
        on_end_ = nullptr;
        f(status_, error);
    }

    tcp::socket socket_;
    std::string request_, head_, pending_;
    std::array<char, 16384> buf_{};
    OnBody on_body_;
    OnEnd on_end_;
    int status_ = 0;
    bool chunked_ = false;
};

std::string post_request(const std::string& path, const std::string& body) {
    return "POST " + path + " HTTP/1.1\r\nHost: bench\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
}

class Load {
public:
    explicit Load(const LoadOptions& o) : o_(o), rng_(o.seed), arrival_timer_(io_) {
        tcp::resolver resolver(io_);
        endpoint_ = *resolver.resolve(o.host, std::to_string(o.port)).begin();
    }

    LoadResult run() {
        start_ = Clock::now();
        deadline_ = start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.duration_s));
        for (int i = 0; i < o_.idle_sockets; ++i) open_idle(false);
        if (o_.health_interval_ms > 0) probe_health();
        if (o_.rate > 0) schedule_arrival();
        else for (int c = 0; c < o_.concurrency; ++c) next_request();
        io_.run();
        if (health_thread_.joinable()) health_thread_.join();
        result_.elapsed_s = secs(start_, last_end_);
        return std::move(result_);
    }

private:
    bool more() const { return Clock::now() < deadline_ && (o_.num_requests == 0 || started_ < o_.num_requests); }
    bool finished() const { return !more() && active_ == 0; }

    void next_request() {
        if (!more()) return;
        ++started_;
        result_.peak_streams = std::max(result_.peak_streams, ++active_);
        json prompt = json::array();
        for (int i = 0; i < o_.input_len; ++i) prompt.push_back(10 + static_cast<int>(rng_() % (o_.vocab - 10)));
        json body = {{"model", o_.model}, {"prompt", prompt}, {"max_tokens", o_.output_len}, {"stream", true}, {"ignore_eos", true},
                     {"temperature", 1.0}, {"seed", rng_() % 1000000}, {"stream_options", {{"include_usage", true}}}};
        auto sample = std::make_shared<RequestSample>();
        auto state = std::make_shared<std::pair<std::string, bool>>();  // SSE text not yet split; [DONE] seen
        auto begin = Clock::now();
        auto last = std::make_shared<Clock::time_point>();
        auto on_body = [this, sample, state, begin, last](const std::string& data) {
            state->first += data;
            size_t end;
            while ((end = state->first.find("\n\n")) != std::string::npos) {
                std::string event = state->first.substr(0, end);
                state->first.erase(0, end + 2);
                if (event.rfind("data: ", 0) != 0) continue;
                if (event == "data: [DONE]") {
                    state->second = true;
                    continue;
                }
                json j = json::parse(event.substr(6), nullptr, false);
                if (j.contains("error")) sample->error = "error event: " + j["error"].dump();
                if (j.contains("usage") && j["usage"].is_object()) sample->tokens = j["usage"].value("completion_tokens", 0);
                if (!j.contains("choices") || j["choices"].empty()) continue;
                auto now = Clock::now();
                if (*last == Clock::time_point{}) sample->ttft = secs(begin, now);
                else sample->itl.push_back(secs(*last, now));
                *last = now;
            }
        };
        auto on_end = [this, sample, state, begin, last](int status, const std::string& error) {
            if (!error.empty()) sample->error = error;
            else if (status != 200) sample->error = "HTTP " + std::to_string(status);
            else if (sample->error.empty() && (!state->second || sample->tokens != o_.output_len))
                sample->error = "incomplete stream (" + std::to_string(sample->tokens) + " tokens)";
            sample->ok = sample->error.empty();
            sample->e2e = secs(begin, *last == Clock::time_point{} ? Clock::now() : *last);
            result_.samples.push_back(std::move(*sample));
            --active_;
            last_end_ = Clock::now();
            if (o_.rate <= 0) next_request();
            if (finished()) stop_background();
        };
        std::make_shared<HttpCall>(io_, post_request("/v1/completions", body.dump()), on_body, on_end)->start(endpoint_);
    }

    void schedule_arrival() {
        std::exponential_distribution<double> gap(o_.rate);
        arrival_timer_.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng_))));
        arrival_timer_.async_wait([this](boost::system::error_code ec) {
            if (ec) return;
            next_request();
            if (more()) schedule_arrival();
            else if (finished()) stop_background();
        });
    }

    void open_idle(bool reopen) {
        if (stopping_) return;
        ++(reopen ? result_.idle_reopened : result_.idle_opened);
        auto call = std::make_shared<HttpCall>(io_, "POST /v1/completions HTTP/1.1\r\nHost", [](const std::string&) {},
                                               [this](int, const std::string&) { open_idle(true); });
        idle_.push_back(call);
        call->start(endpoint_);
    }

    // /health from a thread of its own, with blocking calls, so the probe's latency is the
    // server's and not the wait behind this client's own event loop.
    void probe_health() {
        health_thread_ = std::thread([this] {
            while (!stopping_) {
                std::this_thread::sleep_for(std::chrono::milliseconds(o_.health_interval_ms));
                auto sent = Clock::now();
                boost::system::error_code ec;
                asio::io_context io;
                tcp::socket socket(io);
                socket.connect(endpoint_, ec);
                timeval limit{5, 0};  // a probe that gets no answer in time counts as failed
                if (!ec) setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
                std::string reply;
                if (!ec) asio::write(socket, asio::buffer(std::string("GET /health HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")), ec);
                if (!ec) asio::read(socket, asio::dynamic_buffer(reply), ec);  // until the server closes
                bool ok = reply.rfind("HTTP/1.1 200", 0) == 0;
                std::lock_guard<std::mutex> lock(health_mutex_);
                if (ok) result_.health_ms.push_back(secs(sent, Clock::now()) * 1e3);
                else ++result_.health_failed;
            }
        });
    }

    // The load is done: stop the probe and drop the idle sockets so io_.run() returns.
    void stop_background() {
        stopping_ = true;
        arrival_timer_.cancel();
        idle_.clear();  // their sockets close when the last handler lets go
        io_.stop();
    }

    LoadOptions o_;
    asio::io_context io_;
    tcp::endpoint endpoint_;
    std::mt19937_64 rng_;
    asio::steady_timer arrival_timer_;
    std::thread health_thread_;
    std::mutex health_mutex_;
    std::vector<std::shared_ptr<HttpCall>> idle_;
    Clock::time_point start_, deadline_, last_end_;
    int started_ = 0, active_ = 0;
    std::atomic<bool> stopping_{false};
    LoadResult result_;
};

}  // namespace

LoadResult run_load(const LoadOptions& options) {
    DI_CHECK(options.vocab > 10, "bench-serve: --vocab must exceed 10");
    raise_descriptor_limit();
    return Load(options).run();
}

}  // namespace deepinfer::apps
