#pragma once
// One client connection of HttpServer: reads requests under the server's limits and timeouts,
// hands each to the handler as an Exchange, writes the reply (whole, or streamed in chunks), and
// keeps a read open meanwhile so a client that hangs up is noticed at once. Everything runs on
// the connection's strand; other threads reach it only by posting there.
#include "server/asio.h"

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "server/http_server.h"

namespace deepinfer::server {

class HttpExchange;

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
public:
    using Socket = boost::asio::ip::tcp::socket;
    HttpConnection(Socket socket, HttpServer& server);

    void start();
    // Refuses the connection with `status` (e.g. 503: too many connections), then closes it.
    void start_refused(int status, const std::string& message);
    // From any thread: closes now (aborting a request in progress), or only when idle.
    void close();
    void close_if_idle();

    // The current exchange's reply (on the strand; a stale exchange is ignored).
    void send_response(const HttpExchange* ex, HttpResponse response);
    void send_stream_head(const HttpExchange* ex, HttpResponse head);
    void send_stream_data(const HttpExchange* ex, std::string data);
    void send_stream_end(const HttpExchange* ex);
    Socket::executor_type executor() { return socket_.get_executor(); }
    // Whether a request is being answered; when not, since when the connection has waited.
    bool busy() const { return busy_; }
    int64_t waiting_since() const { return waiting_since_; }

private:
    enum class State { kReading, kHandling, kIdle, kLingering, kClosed };

    void read_header();
    void on_header(boost::beast::error_code ec);
    void read_body();
    void on_body(boost::beast::error_code ec);
    void dispatch();
    void watch();
    void on_watch(boost::beast::error_code ec, size_t n);
    void next_request();
    // Answers a request that cannot be served and closes the connection after the answer.
    void refuse(int status, const std::string& reason, const std::string& message);
    void refuse_parse_error(boost::beast::error_code ec);
    void enqueue(std::string bytes, bool last);
    void write_next();
    void finish_reply();
    void arm_read_timer(double seconds);
    void on_read_timeout();
    void linger_and_close();
    void drain();
    void do_close();
    std::string status_line(int status) const;

    Socket socket_;
    HttpServer& server_;
    boost::beast::flat_buffer buffer_;
    std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
    boost::asio::steady_timer read_timer_, write_timer_;
    std::deque<std::string> outbox_;
    size_t outbox_bytes_ = 0;
    bool writing_ = false, last_queued_ = false, watching_ = false, keep_alive_ = false;
    int version_ = 11;
    uint64_t read_generation_ = 0;
    bool chunked_ = false;
    State state_ = State::kReading;
    std::shared_ptr<HttpExchange> exchange_;
    std::string discard_;
    std::atomic<bool> busy_{false};
    std::atomic<int64_t> waiting_since_{0};  // steady-clock ticks
};

}  // namespace deepinfer::server
