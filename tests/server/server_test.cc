// The OpenAI server over real loopback HTTP: completions and chat (plain and SSE streaming),
// models / health / metrics, 4xx errors with OpenAI bodies, a client that disconnects
// mid-stream, many concurrent streams, and graceful shutdown of the `deepinfer serve` process.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <nlohmann/json.hpp>

#include "deepinfer/engine.h"
#include "server/openai_server.h"
#include "tests/runtime/test_models.h"

namespace deepinfer {
namespace {

using nlohmann::json;

struct Sse {
    std::vector<json> chunks;
    bool done = false;
};

// POST with the body streamed to `on_data`; returning false from it hangs up.
template <typename F>
httplib::Result stream_post(httplib::Client& c, const std::string& path, const json& body, F&& on_data) {
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) { return on_data(data, n); };
    return c.send(req);
}

Sse parse_sse(const std::string& body) {
    Sse out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
        size_t end = body.find("\n\n", pos);
        std::string payload = body.substr(pos + 6, end - pos - 6);
        if (payload == "[DONE]")
            out.done = true;
        else
            out.chunks.push_back(json::parse(payload));
        pos = end;
    }
    return out;
}

class ServerTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new std::string(test::make_model_dir("v4/v4_tiny_a", 1024));
        EngineConfig c;
        c.model.path = *dir_;
        c.model.name = "tiny";
        c.model.threads = 2;
        c.cache.memory_bytes = 8 << 20;
        c.cache.max_sequences = 24;
        // Every test's requests also go through speculative decoding (n-gram drafts, each verified).
        c.speculative.method = "ngram";
        c.speculative.verify = "fixed";
        engine_ = Engine::create(c).release();
        ServerConfig sc;
        sc.port = 0;
        server_ = new server::OpenAiServer(*engine_, sc);
        server_->bind();
        thread_ = new std::thread([] { server_->run(); });
    }
    static void TearDownTestSuite() {
        server_->stop();
        thread_->join();
        delete server_;
        delete engine_;
    }
    static httplib::Client client() {
        httplib::Client c("127.0.0.1", server_->port());
        c.set_read_timeout(60, 0);
        return c;
    }
    static json post(const std::string& path, const json& body, int* status = nullptr) {
        auto r = client().Post(path.c_str(), body.dump(), "application/json");
        EXPECT_TRUE(r) << "no response";
        if (status) *status = r->status;
        return r->get_header_value("Content-Type").find("event-stream") != std::string::npos ? json(r->body) : json::parse(r->body);
    }
    static std::string* dir_;
    static Engine* engine_;
    static server::OpenAiServer* server_;
    static std::thread* thread_;
};
std::string* ServerTest::dir_ = nullptr;
Engine* ServerTest::engine_ = nullptr;
server::OpenAiServer* ServerTest::server_ = nullptr;
std::thread* ServerTest::thread_ = nullptr;

TEST_F(ServerTest, HealthModelsAndUnknownRoutes) {
    auto r = client().Get("/health");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    r = client().Get("/v1/models");
    auto models = json::parse(r->body);
    EXPECT_EQ(models["data"][0]["id"], "tiny");
    r = client().Get("/v1/nothing");
    EXPECT_EQ(r->status, 404);
    EXPECT_TRUE(json::parse(r->body).contains("error"));
}

TEST_F(ServerTest, CompletionStreamingEqualsNonStreaming) {
    json req = {{"model", "tiny"}, {"prompt", "the tale"}, {"max_tokens", 12}, {"temperature", 0}};
    int status = 0;
    json full = post("/v1/completions", req, &status);
    ASSERT_EQ(status, 200) << full.dump();
    EXPECT_EQ(full["object"], "text_completion");
    EXPECT_EQ(full["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(full["usage"]["completion_tokens"], 12);
    EXPECT_EQ(full["usage"]["prompt_tokens"].get<int>(), static_cast<int>(engine_->tokenize("the tale", true).size()));
    req["stream"] = true;
    req["stream_options"] = {{"include_usage", true}};
    Sse sse = parse_sse(post("/v1/completions", req, &status).get<std::string>());
    ASSERT_EQ(status, 200);
    std::string text;
    for (const auto& c : sse.chunks)
        if (!c["choices"].empty()) text += c["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(text, full["choices"][0]["text"].get<std::string>());
    EXPECT_TRUE(sse.done);
    ASSERT_FALSE(sse.chunks.empty());
    EXPECT_EQ(sse.chunks.back()["usage"]["completion_tokens"], 12);  // final usage chunk
}

// `deterministic` without a seed: sampled requests sent while others run get the same tokens and
// logprobs every time; without it, the engine draws a seed per request and they differ.
TEST_F(ServerTest, DeterministicRequestsSampleAlikeWhileOthersRun) {
    auto sample = [&](bool deterministic) {
        json req = {{"prompt", "the tale of"}, {"max_tokens", 16}, {"temperature", 1.5}, {"logprobs", 2}};
        if (deterministic) req["deterministic"] = true;
        int status = 0;
        json r = post("/v1/completions", req, &status);
        EXPECT_EQ(status, 200) << r.dump();
        return r["choices"][0]["logprobs"];
    };
    json alone = sample(true);
    std::vector<std::thread> others;
    for (int i = 0; i < 6; ++i)
        others.emplace_back([i] {
            post("/v1/completions", {{"prompt", std::string(1 + i, 'x') + " other"}, {"max_tokens", 20}, {"temperature", 1.0}});
        });
    json busy = sample(true);
    for (auto& t : others) t.join();
    EXPECT_EQ(busy, alone);  // tokens, their logprobs and the top 2, exactly
    EXPECT_NE(sample(false), sample(false));
}

TEST_F(ServerTest, ChatCompletionsWithLogprobsAndN) {
    json req = {{"messages", {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hello"}}}},
                {"max_tokens", 6}, {"temperature", 0.7}, {"seed", 3}, {"n", 2}, {"logprobs", true}, {"top_logprobs", 2}};
    int status = 0;
    json full = post("/v1/chat/completions", req, &status);
    ASSERT_EQ(status, 200) << full.dump();
    ASSERT_EQ(full["choices"].size(), 2u);
    EXPECT_EQ(full["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(full["choices"][1]["logprobs"]["content"].size(), 6u);
    EXPECT_EQ(full["choices"][1]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
    req["stream"] = true;
    Sse sse = parse_sse(post("/v1/chat/completions", req, &status).get<std::string>());
    std::string texts[2];
    for (const auto& c : sse.chunks)
        for (const auto& ch : c["choices"])
            if (ch["delta"].contains("content")) texts[ch["index"].get<int>()] += ch["delta"]["content"].get<std::string>();
    EXPECT_EQ(texts[0], full["choices"][0]["message"]["content"].get<std::string>());  // same seed: same samples
    EXPECT_EQ(texts[1], full["choices"][1]["message"]["content"].get<std::string>());
}

TEST_F(ServerTest, BadRequestsGet400WithOpenAiErrors) {
    auto check = [&](const std::string& path, const std::string& body, int want, const std::string& needle) {
        auto r = client().Post(path.c_str(), body, "application/json");
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, want) << body;
        json e = json::parse(r->body);
        ASSERT_TRUE(e.contains("error")) << r->body;
        EXPECT_NE(e["error"]["message"].get<std::string>().find(needle), std::string::npos) << r->body;
    };
    check("/v1/completions", "{not json", 400, "not valid JSON");
    check("/v1/completions", R"({"prompt": "x", "max_tokens": "ten"})", 400, "max_tokens must be an integer");
    check("/v1/completions", R"({"model": "gpt-5", "prompt": "x"})", 404, "does not exist");
    check("/v1/completions", R"({"prompt": "x", "top_p": 5})", 400, "top_p");
    check("/v1/completions", R"({"prompt": "x", "max_tokens": 100000000})", 400, "maximum context length");
    check("/v1/completions", R"({"max_tokens": 3})", 400, "prompt is required");
    check("/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})", 400, "unknown message role");
    check("/v1/chat/completions", R"({"messages": []})", 400, "messages must be a non-empty array");
    check("/v1/completions", R"({"prompt": [1, 2, 99999]})", 400, "out of range");
}

TEST_F(ServerTest, DisconnectedClientFreesItsRequest) {
    json req = {{"prompt", "a long story"}, {"max_tokens", 2000}, {"stream", true}, {"ignore_eos", true}};
    std::string got;
    auto c = client();
    stream_post(c, "/v1/completions", req, [&](const char* data, size_t n) {
        got.append(data, n);
        return got.size() < 400;  // hang up after a few chunks
    });
    EXPECT_FALSE(got.empty());
    bool freed = false;
    for (int i = 0; i < 200 && !freed; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        freed = engine_->stats().requests_running == 0 && engine_->stats().requests_waiting == 0;
    }
    EXPECT_TRUE(freed);
}

TEST_F(ServerTest, ManyConcurrentStreams) {
    std::atomic<int> ok{0};
    std::vector<std::thread> clients;
    for (int i = 0; i < 16; ++i)
        clients.emplace_back([&, i] {
            json req = {{"prompt", "story " + std::to_string(i)}, {"max_tokens", 10}, {"stream", true}, {"ignore_eos", true},
                        {"stream_options", {{"include_usage", true}}}};
            auto r = client().Post("/v1/completions", req.dump(), "application/json");
            if (!r || r->status != 200) {
                ADD_FAILURE() << "request " << i << ": " << (r ? std::to_string(r->status) + " " + r->body : httplib::to_string(r.error()));
                return;
            }
            Sse sse = parse_sse(r->body);
            if (sse.done && sse.chunks.back()["usage"]["completion_tokens"] == 10) ++ok;
            else ADD_FAILURE() << "request " << i << ": " << r->body;
        });
    for (auto& t : clients) t.join();
    EXPECT_EQ(ok.load(), 16);
    auto metrics = client().Get("/metrics")->body;
    EXPECT_NE(metrics.find("deepinfer_requests_total{endpoint=\"/v1/completions\",status=\"200\"}"), std::string::npos);
    EXPECT_NE(metrics.find("deepinfer_time_to_first_token_seconds_count"), std::string::npos);
    EXPECT_NE(metrics.find("deepinfer_cache_usage_ratio"), std::string::npos);
    EXPECT_NE(metrics.find("deepinfer_cache_bytes{model=\"tiny\",kind=\"csa_entries\"}"), std::string::npos);
    // A prompt holding 1,000 of the 1,024 token ids: the n-gram drafter finds the last token before.
    json every = json::array();
    for (int t = 0; t < 1000; ++t) every.push_back((t * 389) % 1024);
    int status = 0;
    post("/v1/completions", {{"model", "tiny"}, {"prompt", every}, {"max_tokens", 6}, {"temperature", 0}}, &status);
    EXPECT_EQ(status, 200);
    metrics = client().Get("/metrics")->body;
    EXPECT_EQ(metrics.find("deepinfer_spec_verifications_total{model=\"tiny\"} 0"), std::string::npos);
    EXPECT_NE(metrics.find("deepinfer_spec_verifications_total{model=\"tiny\"}"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("deepinfer_spec_accepted_at_total{model=\"tiny\",position=\"1\"}"), std::string::npos);
}

// `deepinfer serve` as a process: SIGTERM lets an in-flight stream finish, then exits 0.
TEST(ServeProcess, SigtermDrainsAndExits) {
    std::string dir = test::make_model_dir("v4/v4_tiny_b", 768);
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], STDOUT_FILENO);
        execl(DEEPINFER_BINARY, DEEPINFER_BINARY, "serve", "--model", dir.c_str(), "--port", "0", "--threads", "2",
              "--cache-memory", "8MiB", static_cast<char*>(nullptr));
        _exit(127);
    }
    close(out[1]);
    std::string banner;
    char ch;
    while (read(out[0], &ch, 1) == 1 && ch != '\n') banner += ch;
    size_t colon = banner.rfind(':');
    ASSERT_NE(colon, std::string::npos) << banner;
    int port = std::stoi(banner.substr(colon + 1));
    httplib::Client c("127.0.0.1", port);
    std::string body;
    std::thread streamer([&] {
        json req = {{"prompt", "x"}, {"max_tokens", 40}, {"stream", true}, {"ignore_eos", true}, {"stream_options", {{"include_usage", true}}}};
        stream_post(c, "/v1/completions", req, [&](const char* d, size_t n) {
            body.append(d, n);
            return true;
        });
    });
    while (body.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    kill(pid, SIGTERM);
    streamer.join();
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    Sse sse = parse_sse(body);
    EXPECT_TRUE(sse.done);
    EXPECT_EQ(sse.chunks.back()["usage"]["completion_tokens"], 40);  // finished, not cut off
}

}  // namespace
}  // namespace deepinfer
