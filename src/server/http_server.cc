#include "server/http_server.h"


#include "base/error.h"
#include "base/logging.h"
#include "base/process.h"
#include "server/asio.h"
#include "server/http_connection.h"

namespace deepinfer::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

std::string HttpRequest::header(std::string_view name) const {
    for (const auto& [k, v] : headers)
        if (boost::beast::iequals(k, boost::beast::string_view(name.data(), name.size()))) return v;
    return {};
}

struct HttpServer::Io {
    asio::io_context context;
    tcp::acceptor acceptor{context};
    asio::steady_timer accept_retry{context};
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work{context.get_executor()};
};

HttpServer::HttpServer(const ServerConfig& config, Handler handler, HeaderCheck check, RejectListener on_reject)
    : config_(config), handler_(std::move(handler)), check_(std::move(check)), on_reject_(std::move(on_reject)), io_(std::make_unique<Io>()) {
    DI_CHECK(config_.io_threads >= 1, "server: io_threads must be >= 1");
    raise_descriptor_limit();  // every connection holds a descriptor
}

HttpServer::~HttpServer() = default;

asio::io_context& HttpServer::io() { return io_->context; }

void HttpServer::bind() {
    boost::system::error_code ec;
    auto address = asio::ip::make_address(config_.host, ec);
    if (ec) {  // a host name: resolve it
        tcp::resolver resolver(io_->context);
        auto results = resolver.resolve(config_.host, "", ec);
        DI_CHECK(!ec && !results.empty(), "cannot resolve host {}: {}", config_.host, ec.message());
        address = results.begin()->endpoint().address();
    }
    tcp::endpoint endpoint(address, static_cast<unsigned short>(config_.port));
    auto& a = io_->acceptor;
    a.open(endpoint.protocol(), ec);
    if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) a.bind(endpoint, ec);
    if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
    DI_CHECK(!ec, "cannot listen on {}:{}: {}", config_.host, config_.port, ec.message());
    port_ = a.local_endpoint().port();
}

void HttpServer::run() {
    accept_next();
    std::vector<std::thread> threads;
    for (int i = 1; i < config_.io_threads; ++i) threads.emplace_back([this] { io_->context.run(); });
    io_->context.run();
    for (auto& t : threads) t.join();
}

void HttpServer::accept_next() {
    if (!accepting_) return;
    io_->acceptor.async_accept(asio::make_strand(io_->context), [this](boost::system::error_code ec, tcp::socket socket) {
        if (!accepting_) return;
        if (ec) {
            // Out of descriptors (or a transient error): try again shortly instead of spinning.
            spdlog::warn("server: accept failed: {}", ec.message());
            io_->accept_retry.expires_after(std::chrono::milliseconds(50));
            io_->accept_retry.async_wait([this](boost::system::error_code e) {
                if (!e) accept_next();
            });
            return;
        }
        socket.set_option(tcp::no_delay(true), ec);
        auto conn = std::make_shared<HttpConnection>(std::move(socket), *this);
        track(conn);
        if (open_connections_ > config_.max_connections && !evict_longest_waiting())
            asio::post(conn->executor(), [conn] { conn->start_refused(503, "too many connections; try again later"); });
        else
            asio::post(conn->executor(), [conn] { conn->start(); });
        accept_next();
    });
}

// At the connection limit, the connection that has waited longest without a request in progress
// (idle, or still sending its head) makes room, so such connections cannot lock others out.
bool HttpServer::evict_longest_waiting() {
    std::shared_ptr<HttpConnection> victim;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& [ptr, weak] : connections_) {
            auto c = weak.lock();
            if (!c || c->busy() || c->waiting_since() == 0) continue;
            if (!victim || c->waiting_since() < victim->waiting_since()) victim = std::move(c);
        }
    }
    if (!victim) return false;
    if (on_reject_) on_reject_("evicted_waiting_connection", 0);
    victim->close();
    return true;
}

void HttpServer::track(const std::shared_ptr<HttpConnection>& c) {
    std::lock_guard<std::mutex> lock(mutex_);
    connections_[c.get()] = c;
    open_connections_ = static_cast<int64_t>(connections_.size());
}

void HttpServer::untrack(HttpConnection* c) {
    std::lock_guard<std::mutex> lock(mutex_);
    connections_.erase(c);
    open_connections_ = static_cast<int64_t>(connections_.size());
}

template <typename F>
void HttpServer::for_each_connection(F&& f) {
    std::vector<std::shared_ptr<HttpConnection>> live;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& [ptr, weak] : connections_)
            if (auto c = weak.lock()) live.push_back(std::move(c));
    }
    for (auto& c : live) f(*c);
}

void HttpServer::stop_accepting() {
    if (accepting_.exchange(false)) {
        asio::post(io_->context, [this] {
            boost::system::error_code ignored;
            io_->acceptor.close(ignored);
            io_->accept_retry.cancel();
        });
    }
    for_each_connection([](HttpConnection& c) { c.close_if_idle(); });
}

void HttpServer::stop() {
    stop_accepting();
    for_each_connection([](HttpConnection& c) { c.close(); });
    // run() returns once the closes ran and nothing else is pending; a last stop bounds the wait
    // for work that would not end on its own.
    io_->work.reset();
    auto deadline = std::make_shared<asio::steady_timer>(io_->context, std::chrono::milliseconds(500));
    deadline->async_wait([this, deadline](boost::system::error_code) { io_->context.stop(); });
}

}  // namespace deepinfer::server
