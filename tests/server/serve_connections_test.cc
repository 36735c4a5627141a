// `deepinfer serve` (the bundled model) under connection-level abuse and lifecycle events: idle,
// half-sent and oversized requests, clients that leave before their answer, a long prefill next
// to short requests, SIGTERM with sockets in every state, and API keys from a file or the
// environment.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdio>
#include <thread>

#include "tests/server/serve_process.h"

namespace deepinfer {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<std::string> nano(std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"--model", test::nano_model_dir()};
    args.insert(args.end(), more.begin(), more.end());
    return args;
}

// Milliseconds a fresh GET /health takes (-1: no 200 within `timeout_s`).
double health_ms(int port, double timeout_s = 5) {
    auto start = Clock::now();
    auto r = test::raw_request(port, test::http_get("/health"), timeout_s);
    return r.status == 200 ? since(start) * 1e3 : -1;
}

std::vector<int> half_sent_sockets(int port, int count) {
    std::vector<int> fds;
    for (int i = 0; i < count; ++i) {
        int fd = test::connect_loopback(port);
        if (fd < 0) break;
        test::send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost");
        fds.push_back(fd);
    }
    return fds;
}

void close_all(std::vector<int>& fds) {
    for (int fd : fds) close(fd);
    fds.clear();
}

TEST(ServeConnections, HalfSentConnectionsDoNotStarveOthers) {
    test::ServeProcess server(nano());
    auto fds = half_sent_sockets(server.port(), 600);
    EXPECT_EQ(fds.size(), 600u);
    double ms = health_ms(server.port());
    EXPECT_GE(ms, 0) << "/health did not answer with 600 half-sent connections open";
    EXPECT_LT(ms, 1000);
    close_all(fds);

    // At the connection limit the longest-waiting idle connection makes room.
    test::ServeProcess capped(nano({"--max-connections", "16"}));
    fds = half_sent_sockets(capped.port(), 40);
    EXPECT_GE(health_ms(capped.port()), 0) << "16 half-sent connections locked the server";
    close_all(fds);
}

TEST(ServeConnections, HugeHeadersAreRefusedAndMemoryStaysBounded) {
    test::ServeProcess server(nano());
    int64_t rss_before = server.rss_kib();
    std::string header_block;
    std::string value(4000, 'v');
    for (int i = 0; i < 50000; ++i) header_block += "X-H" + std::to_string(i) + ": " + value + "\r\n";
    for (int round = 0; round < 6; ++round) {
        int fd = test::connect_loopback(server.port());
        test::send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\n" + header_block + "\r\n");  // may fail once refused
        auto r = test::parse_raw_response(test::read_until_close(fd, 10));
        close(fd);
        EXPECT_EQ(r.status, 431) << "round " << round;
    }
    std::string many;
    for (int i = 0; i < 500; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
    EXPECT_EQ(test::raw_request(server.port(), test::http_get("/health", many)).status, 431);
    EXPECT_LT(server.rss_kib() - rss_before, 64 * 1024) << "the server kept the headers' memory";
    EXPECT_GE(health_ms(server.port()), 0);
    auto big = test::raw_request(server.port(), test::http_post("/v1/completions", std::string(40 << 20, ' ')));
    EXPECT_EQ(big.status, 413);
}

TEST(ServeConnections, ClientsThatLeaveCancelTheirRequests) {
    test::ServeProcess server(nano({"--max-running", "4"}));
    httplib::Client c("127.0.0.1", server.port());
    std::vector<int> fds;
    for (int i = 0; i < 12; ++i) {  // non-streaming and streaming, running and queued
        bool stream = i % 2 == 1;
        json body = {{"prompt", "def f" + std::to_string(i)}, {"max_tokens", 8000}, {"ignore_eos", true}, {"stream", stream}};
        int fd = test::connect_loopback(server.port());
        test::send_all(fd, test::http_post("/v1/completions", body.dump()));
        fds.push_back(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto scrape = [&] {
        auto r = c.Get("/metrics");
        return r ? r->body : std::string();
    };
    std::string m = scrape();
    EXPECT_EQ(test::metric_value(m, "deepinfer_requests_active{model=\"deepinfer-nano\"}"), 12) << m;
    close_all(fds);
    auto start = Clock::now();
    double active = -1, running = -1, waiting = -1;
    while (since(start) < 10) {
        m = scrape();
        active = test::metric_value(m, "deepinfer_requests_active{model=\"deepinfer-nano\"}");
        running = test::metric_value(m, "deepinfer_running_batch{model=\"deepinfer-nano\"}");
        waiting = test::metric_value(m, "deepinfer_queue_length{model=\"deepinfer-nano\"}");
        if (active == 0 && running == 0 && waiting == 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(active, 0);
    EXPECT_EQ(running, 0);
    EXPECT_EQ(waiting, 0) << "the queue gauge must settle once clients left";
    EXPECT_LT(since(start), 5.0) << "cancellation took more than a few steps";
    EXPECT_GE(test::metric_value(m, "deepinfer_requests_total{endpoint=\"/v1/completions\",status=\"499\"}"), 12);
}

// Streams one completion; returns when its first token arrived (epoch if none).
Clock::time_point first_token_of(int port, const json& body) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(300, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    Clock::time_point first{};
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
        if (first == Clock::time_point{} && std::string(d, n).find("\"text\"") != std::string::npos) first = Clock::now();
        return true;
    };
    c.send(req);
    return first;
}

TEST(ServeConnections, LongPrefillDoesNotBlockShortRequests) {
    test::ServeProcess server(nano({"--max-batch-tokens", "16"}));
    json prompt = json::array();
    for (int i = 0; i < 8000; ++i) prompt.push_back(100 + i % 2000);
    Clock::time_point long_first{};
    std::thread long_request([&] { long_first = first_token_of(server.port(), {{"prompt", prompt}, {"max_tokens", 1}, {"stream", true}}); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the long prompt is being prefilled
    Clock::time_point short_sent = Clock::now();
    Clock::time_point short_first = first_token_of(server.port(), {{"prompt", "x"}, {"max_tokens", 2}, {"stream", true}});
    long_request.join();
    ASSERT_NE(short_first, Clock::time_point{});
    ASSERT_GT(long_first, short_sent) << "the long prefill ended before the short request came: make the prompt longer";
    EXPECT_LT(short_first, long_first) << "the short request waited for the whole long prefill";
}

TEST(ServeConnections, SigtermExitsWithinTheGraceWhateverTheSockets) {
    test::ServeProcess server(nano({"--shutdown-grace", "2"}));
    auto half = half_sent_sockets(server.port(), 3);
    int idle = test::connect_loopback(server.port());  // a kept-alive connection after one request
    test::send_all(idle, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string streamed;
    std::thread streamer([&] {  // runs far longer than the grace period
        int fd = test::connect_loopback(server.port());
        test::send_all(fd, test::http_post("/v1/completions", R"({"prompt":"x","max_tokens":8000,"ignore_eos":true,"stream":true})"));
        streamed = test::read_until_close(fd, 30);
        close(fd);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto [status, seconds] = server.terminate(30);
    streamer.join();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_LT(seconds, 2 + 3.0) << "exit took longer than the grace period allows";
    // The cancelled stream ends with an error event, not with a finish reason SDKs reject.
    auto r = test::parse_raw_response(streamed);
    bool done = false;
    auto events = test::sse_events(r.body, &done);
    ASSERT_FALSE(events.empty());
    EXPECT_TRUE(events.back().contains("error")) << events.back();
    for (const auto& e : events)
        if (e.contains("choices") && !e["choices"].empty()) EXPECT_NE(e["choices"][0]["finish_reason"], "abort");
    close_all(half);
    close(idle);
}

// A prompt sent again is served from the prefix cache: the usage reports the cached tokens and
// /metrics the hit, and the greedy output is the same.
TEST(ServeConnections, PrefixCacheHitsShowInUsageAndMetrics) {
    test::ServeProcess server(nano({"--block-size", "8"}));
    httplib::Client c("127.0.0.1", server.port());
    c.set_read_timeout(120, 0);
    json prompt = json::array();
    for (int i = 0; i < 2500; ++i) prompt.push_back(100 + (i * 7) % 3000);
    json body = {{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}};
    auto first = json::parse(c.Post("/v1/completions", body.dump(), "application/json")->body);
    auto second = json::parse(c.Post("/v1/completions", body.dump(), "application/json")->body);
    EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_GT(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 1000) << second["usage"];
    EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
    std::string m = c.Get("/metrics")->body;
    EXPECT_GT(test::metric_value(m, "deepinfer_prefix_cache_hit_tokens_total{model=\"deepinfer-nano\"}"), 1000) << m;
    EXPECT_GT(test::metric_value(m, "deepinfer_prefix_cache_tier_hit_tokens_total{model=\"deepinfer-nano\",tier=\"device\"}"), 1000);
}

TEST(ServeConnections, ApiKeyFromTheEnvironmentOrAFile) {
    auto models_status = [](int port, const std::string& key) {
        return test::raw_request(port, test::http_get("/v1/models", key.empty() ? "" : "Authorization: Bearer " + key + "\r\n")).status;
    };
    {
        test::ServeProcess server(nano(), {"DEEPINFER_API_KEY=env-secret"});
        EXPECT_EQ(models_status(server.port(), ""), 401);
        EXPECT_EQ(models_status(server.port(), "env-secreT"), 401);
        EXPECT_EQ(models_status(server.port(), "env-secret"), 200);
        EXPECT_EQ(models_status(server.port(), "env-secret-longer"), 401);
    }
    char path[] = "/tmp/di_key_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    const std::string key = "file-secret\n";
    ASSERT_EQ(write(fd, key.data(), key.size()), static_cast<ssize_t>(key.size()));
    close(fd);
    {
        test::ServeProcess server(nano({"--api-key-file", path}));
        EXPECT_EQ(models_status(server.port(), ""), 401);
        EXPECT_EQ(models_status(server.port(), "file-secret"), 200);
        EXPECT_EQ(test::raw_request(server.port(), test::http_get("/health")).status, 200);  // health needs no key
    }
    std::remove(path);
}

}  // namespace
}  // namespace deepinfer
