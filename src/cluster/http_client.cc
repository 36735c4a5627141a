#include "cluster/http_client.h"

#include "server/asio.h"

#include <array>
#include <cstdint>
#include <limits>
#include <chrono>
#include <optional>
#include <regex>

#include "base/error.h"

namespace deepinfer::cluster {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using beast::error_code;

HttpTarget parse_target(const std::string& url) {
    static const std::regex form(R"(^(?:http://)?([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})/?$)");
    std::smatch m;
    DI_CHECK(std::regex_match(url, m, form), "'{}' is not an instance address (host:port or http://host:port)", url);
    int port = std::stoi(m[2].str());
    DI_CHECK(port >= 1 && port <= 65535, "'{}': the port must be in 1..65535", url);
    std::string host = m[1].str();
    if (host.front() == '[') host = host.substr(1, host.size() - 2);
    return {host, port};
}

namespace {

std::chrono::steady_clock::duration seconds(double s) {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

class BeastCall final : public HttpClientCall {
public:
    BeastCall(asio::io_context& io, HttpTarget target, HttpClientRequest request, Callbacks callbacks)
        : strand_(asio::make_strand(io)), resolver_(strand_), stream_(strand_), target_(std::move(target)),
          options_(std::move(request)), callbacks_(std::move(callbacks)) {
        request_.method_string(options_.method);
        request_.target(options_.path);
        request_.version(11);
        request_.set(http::field::host, target_.str());
        request_.set(http::field::connection, "close");
        for (const auto& [name, value] : options_.headers) request_.set(name, value);
        if (!options_.body.empty() || options_.method == "POST") {
            if (request_[http::field::content_type].empty()) request_.set(http::field::content_type, "application/json");
            request_.body() = std::move(options_.body);
            request_.prepare_payload();
        }
        // Unlimited, spelled as a number: with boost::none, Boost 1.74 compares lengths against an
        // empty optional and refuses every body ("body limit exceeded").
        parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
        parser_.header_limit(64 << 10);
    }

    void run() {
        auto self = std::static_pointer_cast<BeastCall>(shared_from_this());
        asio::dispatch(strand_, [self] {
            self->stream_.expires_after(seconds(self->options_.connect_timeout_s));
            self->resolver_.async_resolve(self->target_.host, std::to_string(self->target_.port),
                                          [self](error_code ec, tcp::resolver::results_type results) {
                                              if (ec) return self->end("resolve: " + ec.message());
                                              self->connect(results);
                                          });
        });
    }

    void cancel() override {
        auto self = std::static_pointer_cast<BeastCall>(shared_from_this());
        asio::post(strand_, [self] { self->end("cancelled"); });
    }

private:
    void connect(const tcp::resolver::results_type& results) {
        auto self = std::static_pointer_cast<BeastCall>(shared_from_this());
        stream_.async_connect(results, [self](error_code ec, const tcp::endpoint&) {
            if (ec) return self->end("connect: " + ec.message());
            self->stream_.expires_after(seconds(self->options_.idle_timeout_s));
            http::async_write(self->stream_, self->request_, [self](error_code e, size_t) {
                if (e) return self->end("write: " + e.message());
                self->read_head();
            });
        });
    }

    void read_head() {
        auto self = std::static_pointer_cast<BeastCall>(shared_from_this());
        http::async_read_header(stream_, buffer_, parser_, [self](error_code ec, size_t) {
            if (ec) return self->end("read: " + ec.message());
            Headers headers;
            for (const auto& f : self->parser_.get()) headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
            if (self->callbacks_.on_head) self->callbacks_.on_head(self->parser_.get().result_int(), headers);
            self->read_body();
        });
    }

    void read_body() {
        if (ended_) return;
        if (parser_.is_done()) return end("");
        parser_.get().body().data = chunk_.data();
        parser_.get().body().size = chunk_.size();
        stream_.expires_after(seconds(options_.idle_timeout_s));
        auto self = std::static_pointer_cast<BeastCall>(shared_from_this());
        // read_some: hand on what arrived (a streamed event) instead of waiting for the chunk
        // buffer to fill or the body to end.
        http::async_read_some(stream_, buffer_, parser_, [self](error_code ec, size_t) {
            if (ec == http::error::need_buffer) ec = {};
            size_t got = self->chunk_.size() - self->parser_.get().body().size;
            if (got > 0 && !self->ended_ && self->callbacks_.on_body) self->callbacks_.on_body({self->chunk_.data(), got});
            if (ec) return self->end(ec == beast::error::timeout ? "read: timed out" : "read: " + ec.message());
            self->read_body();
        });
    }

    void end(const std::string& error) {
        if (ended_) return;
        ended_ = true;
        error_code ignored;
        resolver_.cancel();
        stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
        stream_.close();
        if (callbacks_.on_end) callbacks_.on_end(error);
        callbacks_ = {};
    }

    asio::strand<asio::io_context::executor_type> strand_;
    tcp::resolver resolver_;
    beast::tcp_stream stream_;
    HttpTarget target_;
    HttpClientRequest options_;
    Callbacks callbacks_;
    http::request<http::string_body> request_;
    http::response_parser<http::buffer_body> parser_;
    beast::flat_buffer buffer_;
    std::array<char, 16384> chunk_{};
    bool ended_ = false;
};

}  // namespace

std::shared_ptr<HttpClientCall> HttpClientCall::start(asio::io_context& io, const HttpTarget& target, HttpClientRequest request,
                                                      Callbacks callbacks) {
    auto call = std::make_shared<BeastCall>(io, target, std::move(request), std::move(callbacks));
    call->run();
    return call;
}

void http_fetch(asio::io_context& io, const HttpTarget& target, HttpClientRequest request,
                std::function<void(int status, std::string body, std::string error, Headers headers)> done) {
    struct State {
        int status = 0;
        std::string body;
        Headers headers;
    };
    auto state = std::make_shared<State>();
    HttpClientCall::Callbacks cb;
    cb.on_head = [state](int status, const Headers& headers) {
        state->status = status;
        state->headers = headers;
    };
    cb.on_body = [state](std::string_view data) { state->body.append(data); };
    cb.on_end = [state, done = std::move(done)](const std::string& error) {
        done(error.empty() ? state->status : 0, std::move(state->body), error, std::move(state->headers));
    };
    HttpClientCall::start(io, target, std::move(request), std::move(cb));
}

}  // namespace deepinfer::cluster
