#pragma once
// An event-driven HTTP/1.1 client (Boost.Beast over Asio) for talking to engine instances: the
// router forwards requests and streams their replies back, a decode instance asks a prefill
// instance for a prompt's state, the router probes /health. One exchange per connection
// ("Connection: close"), so a failed instance never leaves a pooled connection half-used.
// Callbacks run on the call's strand, in order; nothing blocks a thread.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace deepinfer::cluster {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpTarget {
    std::string host;
    int port = 0;
    std::string str() const { return host + ":" + std::to_string(port); }
    bool operator==(const HttpTarget&) const = default;
};

// "host:port" or "http://host:port" (a trailing "/" is allowed); throws deepinfer::Error otherwise.
HttpTarget parse_target(const std::string& url);

struct HttpClientRequest {
    std::string method = "GET";
    std::string path = "/";
    Headers headers;
    std::string body;
    double connect_timeout_s = 5;
    // The longest silence allowed while the response arrives (a stalled instance ends the call).
    double idle_timeout_s = 300;
};

class HttpClientCall : public std::enable_shared_from_this<HttpClientCall> {
public:
    struct Callbacks {
        // The status line and headers arrived.
        std::function<void(int status, const Headers& headers)> on_head;
        // A piece of the body (de-chunked).
        std::function<void(std::string_view data)> on_body;
        // The end: `error` is empty when the whole response arrived; else why it did not
        // ("connect: ...", "cancelled", a read error or timeout). Runs exactly once.
        std::function<void(const std::string& error)> on_end;
    };

    static std::shared_ptr<HttpClientCall> start(boost::asio::io_context& io, const HttpTarget& target, HttpClientRequest request,
                                                 Callbacks callbacks);
    virtual ~HttpClientCall() = default;
    // From any thread: ends the call (on_end gets "cancelled" unless it ended already).
    virtual void cancel() = 0;
};

// A whole response: `done(status, body, error, headers)` once (status 0 and an error when none came).
void http_fetch(boost::asio::io_context& io, const HttpTarget& target, HttpClientRequest request,
                std::function<void(int status, std::string body, std::string error, Headers headers)> done);

}  // namespace deepinfer::cluster
