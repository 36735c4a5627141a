#pragma once
// An event-driven HTTP/1.1 server (Boost.Beast over Asio). A few I/O threads serve every
// connection, so an idle, slow or half-sent connection costs a socket and a timer, never a
// thread, and cannot starve the others. Limits (header bytes and count, body bytes, how long a
// header or body may take to arrive, connections) are answered with 4xx / 503 and reported
// through `on_reject`. Handlers get an Exchange: they answer at once or stream the body later
// from any thread, and learn through on_abort() when the client went away.
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "deepinfer/config.h"

namespace boost::asio {
class io_context;
}

namespace deepinfer::server {

struct HttpRequest {
    std::string method;  // "GET", "POST", ...
    std::string path;    // the target without its query
    int version = 11;    // 10 = HTTP/1.0, 11 = HTTP/1.1
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    // The first header of that name (case-insensitive); empty when absent.
    std::string header(std::string_view name) const;
};

struct HttpResponse {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
};

// One request's way back to its client. Thread-safe; calls after the connection closed do
// nothing. A handler must eventually respond() or start_stream() ... end_stream().
class Exchange {
public:
    virtual ~Exchange() = default;
    virtual const HttpRequest& request() const = 0;
    virtual void respond(HttpResponse response) = 0;
    // A body sent in pieces: chunked for HTTP/1.1; for HTTP/1.0 sent as is, then the
    // connection closes. `head.body` is ignored.
    virtual void start_stream(HttpResponse head) = 0;
    virtual void write(std::string data) = 0;
    virtual void end_stream() = 0;
    // Runs once when the client goes away (or the server closes the connection) before the
    // reply was complete; at once when that already happened.
    virtual void on_abort(std::function<void()> callback) = 0;
};

class HttpConnection;

class HttpServer {
public:
    using Handler = std::function<void(std::shared_ptr<Exchange>)>;
    // Runs once the request line and headers arrived, before the body is read: a response
    // refuses the request (e.g. 401) without reading its body, and closes the connection.
    using HeaderCheck = std::function<std::optional<HttpResponse>(const HttpRequest& head)>;
    // Told why a request or connection was refused ("body_too_large", "header_timeout", ...), with
    // the HTTP status answered (0 when the connection was closed without an answer).
    using RejectListener = std::function<void(const std::string& reason, int status)>;

    HttpServer(const ServerConfig& config, Handler handler, HeaderCheck check, RejectListener on_reject);
    ~HttpServer();

    // Binds host:port (port 0 picks a free one); throws deepinfer::Error when it cannot.
    void bind();
    int port() const { return port_; }
    // Serves on the I/O threads until stop(); returns when they finished.
    void run();
    // Stops accepting, closes every connection that is not inside a request; connections
    // finish their current request and then close.
    void stop_accepting();
    // Closes every connection (their handlers' on_abort runs) and ends run().
    void stop();
    boost::asio::io_context& io();
    int64_t open_connections() const { return open_connections_.load(); }

private:
    friend class HttpConnection;
    void accept_next();
    bool evict_longest_waiting();
    void track(const std::shared_ptr<HttpConnection>& c);
    void untrack(HttpConnection* c);
    template <typename F>
    void for_each_connection(F&& f);

    ServerConfig config_;
    Handler handler_;
    HeaderCheck check_;
    RejectListener on_reject_;
    struct Io;
    std::unique_ptr<Io> io_;
    std::mutex mutex_;
    std::unordered_map<HttpConnection*, std::weak_ptr<HttpConnection>> connections_;
    std::atomic<int64_t> open_connections_{0};
    std::atomic<bool> accepting_{true};
    int port_ = 0;
};

}  // namespace deepinfer::server
