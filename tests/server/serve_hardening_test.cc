// `deepinfer serve` (the bundled model) driven the way a careless client or an attacker would:
// deep nesting, prompts beyond the context, wrong JSON types, token ids beyond 32 bits, huge
// headers, half-sent connections, clients that leave, a long prefill next to short requests, and
// the protocol details SDKs rely on. Each test states the behaviour the server must show; every
// one of them failed against the server before the event-driven rewrite (see docs/server.md).
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <thread>

#include "tests/server/serve_process.h"

namespace deepinfer {
namespace {

using nlohmann::json;
using test::raw_request;

class ServeHardening : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        // Only flags every build under test knows (DEEPINFER_SERVE_BINARY may be an older one).
        server_ = new test::ServeProcess({"--model", test::nano_model_dir(), "--max-batch-tokens", "64", "--max-sequences", "16"});
        ASSERT_GT(server_->port(), 0) << "the server did not start";
    }
    static void TearDownTestSuite() { delete server_; }

    static httplib::Client client() {
        httplib::Client c("127.0.0.1", server_->port());
        c.set_read_timeout(120, 0);
        return c;
    }
    static std::pair<int, json> post(const std::string& path, const std::string& body) {
        auto r = client().Post(path.c_str(), body, "application/json");
        if (!r) return {0, json()};
        return {r->status, r->get_header_value("Content-Type") == "application/json" ? json::parse(r->body) : json(r->body)};
    }
    static std::string metrics() {
        auto r = client().Get("/metrics");
        return r ? r->body : "";
    }
    static bool healthy() {
        auto r = client().Get("/health");
        return r && r->status == 200;
    }
    static test::ServeProcess* server_;
};
test::ServeProcess* ServeHardening::server_ = nullptr;

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST_F(ServeHardening, DeepNestingIsRefusedWithoutCrashing) {
    std::string in_tools = R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":)" +
                           nested(100000) + "}}]}";
    std::string in_calls = R"({"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":)" +
                           nested(100000) + R"(}}]},{"role":"user","content":"x"}]})";
    for (const std::string& body : {in_tools, in_calls}) {
        auto [status, reply] = post("/v1/chat/completions", body);
        ASSERT_EQ(status, 400) << reply.dump().substr(0, 300);
        EXPECT_NE(reply["error"]["message"].get<std::string>().find("nests deeper"), std::string::npos);
    }
    EXPECT_TRUE(healthy());
    EXPECT_GE(test::metric_value(metrics(), "deepinfer_rejected_total{reason=\"nesting_too_deep\"}"), 2);
}

TEST_F(ServeHardening, ContextLimitIsTheModelsPositions) {
    auto r = client().Get("/v1/models");
    ASSERT_TRUE(r);
    auto models = json::parse(r->body);
    EXPECT_EQ(models["data"][0]["max_model_len"], 8192);  // deepinfer-nano's max_position_embeddings
    json prompt = json::array();
    for (int i = 0; i < 100000; ++i) prompt.push_back(100);
    auto start = std::chrono::steady_clock::now();
    auto [status, reply] = post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 4}}.dump());
    EXPECT_EQ(status, 400);
    EXPECT_NE(reply["error"]["message"].get<std::string>().find("maximum context length is 8192"), std::string::npos) << reply;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
    prompt = json::array();
    for (int i = 0; i < 8000; ++i) prompt.push_back(100);
    std::tie(status, reply) = post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 500}}.dump());
    EXPECT_EQ(status, 400) << "8,000 + 500 tokens exceed 8,192";
}

TEST_F(ServeHardening, WrongJsonTypesAre400AndCounted) {
    double before = test::metric_value(metrics(), "deepinfer_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"}");
    const char* bodies[] = {
        R"({"messages":[{"role":"tool","content":"x","tool_call_id":5}]})",
        R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":5,"function":{"name":"f"}}]})",
        R"({"messages":[{"role":"user","content":[{"type":5,"text":"x"}]}]})",
        R"({"messages":[{"role":"assistant","content":"","tool_calls":[{"id":5,"type":"function","function":{"name":"f","arguments":"{}"}}]}]})",
        R"({"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"a","type":"function","function":{"name":7,"arguments":"{}"}}]}]})",
    };
    for (const char* body : bodies) {
        auto [status, reply] = post("/v1/chat/completions", body);
        EXPECT_EQ(status, 400) << body << " -> " << reply;
        EXPECT_EQ(reply["error"]["type"], "invalid_request_error") << body;
    }
    // A reply is counted after it is written: wait (bounded) for the last one to be counted.
    double after = 0;
    for (int i = 0; i < 100; ++i) {
        after = test::metric_value(metrics(), "deepinfer_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"}");
        if (after - std::max(before, 0.0) >= 5.0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(after - std::max(before, 0.0), 5.0);
}

TEST_F(ServeHardening, TokenIdsBeyond32BitsAreRefused) {
    for (const char* body : {R"({"prompt": [4294967301]})", R"({"prompt": [-1]})", R"({"prompt": "x", "logit_bias": {"4294967301": 5}})",
                             R"({"prompt": [[5, 18446744073709551615]]})"}) {
        auto [status, reply] = post("/v1/completions", body);
        EXPECT_EQ(status, 400) << body << " -> " << reply;
        EXPECT_NE(reply.dump().find("out of range"), std::string::npos) << reply;
    }
}

TEST_F(ServeHardening, UsageChunkOnlyWhenAsked) {
    json req = {{"prompt", "def "}, {"max_tokens", 5}, {"stream", true}, {"ignore_eos", true}};
    auto plain = test::sse_events(post("/v1/completions", req.dump()).second.get<std::string>());
    ASSERT_FALSE(plain.empty());
    for (const auto& e : plain) {
        ASSERT_FALSE(e["choices"].empty()) << "a chunk without choices breaks `chunk.choices[0]`: " << e;
        EXPECT_FALSE(e.contains("usage"));
    }
    req["stream_options"] = {{"include_usage", true}};
    auto with = test::sse_events(post("/v1/completions", req.dump()).second.get<std::string>());
    ASSERT_FALSE(with.empty());
    EXPECT_TRUE(with.back()["choices"].empty());
    EXPECT_EQ(with.back()["usage"]["completion_tokens"], 5);
}

TEST_F(ServeHardening, ToolCallsDoNotHoldBackContent) {
    json req = {{"messages", {{{"role", "user"}, {"content", "write code"}}}}, {"max_tokens", 24}, {"ignore_eos", true},
                {"temperature", 0}, {"stream", true},
                {"tools", {{{"type", "function"}, {"function", {{"name", "run"}, {"parameters", {{"type", "object"}}}}}}}}};
    auto events = test::sse_events(post("/v1/chat/completions", req.dump()).second.get<std::string>());
    int content_chunks = 0;
    std::erase_if(events, [](const json& e) { return e["choices"].empty(); });  // a usage chunk (its own test)
    for (const auto& e : events)
        if (e["choices"][0]["delta"].contains("content")) ++content_chunks;
    EXPECT_GT(content_chunks, 3) << "content must stream as it is generated, not in one piece at the end";
    for (const auto& e : events) {
        const json& f = e["choices"][0]["finish_reason"];
        EXPECT_TRUE(f.is_null() || f == "stop" || f == "length" || f == "tool_calls") << f;
    }
}

TEST_F(ServeHardening, BestOfReturnsTheMostLikelySampleAndSuffixIsRefused) {
    // With one seed, n = 3 draws the same three samples best_of = 3 ranks: find a seed whose most
    // likely sample is not the first, so returning the first one would be caught.
    for (int seed = 1; seed < 40; ++seed) {
        json base = {{"prompt", "import "}, {"max_tokens", 6}, {"temperature", 1.0}, {"seed", seed}, {"logprobs", 0}};
        json all = base;
        all["n"] = 3;
        auto [status, three] = post("/v1/completions", all.dump());
        ASSERT_EQ(status, 200) << three;
        int best = 0;
        double best_sum = -1e30;
        for (int i = 0; i < 3; ++i) {
            double sum = 0;
            for (const auto& l : three["choices"][i]["logprobs"]["token_logprobs"]) sum += l.get<double>();
            if (sum > best_sum) best_sum = sum, best = i;
        }
        if (best == 0) continue;
        json one = base;
        one["best_of"] = 3;
        auto [status1, picked] = post("/v1/completions", one.dump());
        ASSERT_EQ(status1, 200) << picked;
        ASSERT_EQ(picked["choices"].size(), 1u);
        EXPECT_EQ(picked["choices"][0]["text"], three["choices"][best]["text"]);
        break;
    }
    EXPECT_EQ(post("/v1/completions", R"({"prompt": "x", "suffix": "y"})").first, 400);
    EXPECT_EQ(post("/v1/completions", R"({"prompt": "x", "best_of": 2, "stream": true})").first, 400);
    EXPECT_EQ(post("/v1/completions", R"({"prompt": "x", "not_a_field": 1})").first, 400);
}

TEST_F(ServeHardening, EchoCarriesThePromptWithoutSpecialTokens) {
    auto [status, reply] = post("/v1/completions", R"({"prompt": "def add(a, b):", "max_tokens": 3, "echo": true})");
    ASSERT_EQ(status, 200) << reply;
    EXPECT_EQ(reply["choices"][0]["text"].get<std::string>().rfind("def add(a, b):", 0), 0u) << reply;
}

TEST_F(ServeHardening, WrongMethodsGet405WithAllow) {
    auto r = raw_request(server_->port(), test::http_get("/v1/completions"));
    EXPECT_EQ(r.status, 405);
    EXPECT_EQ(r.headers["allow"], "POST");
    r = raw_request(server_->port(), test::http_post("/health", "{}"));
    EXPECT_EQ(r.status, 405);
    EXPECT_EQ(r.headers["allow"], "GET");
    EXPECT_EQ(raw_request(server_->port(), test::http_get("/nowhere")).status, 404);
}

TEST_F(ServeHardening, Http10ClientsGetNoChunking) {
    std::string body = R"({"prompt": "x", "max_tokens": 4, "stream": true, "ignore_eos": true})";
    int fd = test::connect_loopback(server_->port());
    test::send_all(fd, test::http_post("/v1/completions", body, "", "1.0"));
    std::string raw = test::read_until_close(fd, 30);
    close(fd);
    EXPECT_EQ(raw.rfind("HTTP/1.0 200", 0), 0u) << raw.substr(0, 200);
    EXPECT_EQ(raw.find("Transfer-Encoding"), std::string::npos);
    bool done = false;
    auto events = test::sse_events(raw.substr(raw.find("\r\n\r\n") + 4), &done);
    EXPECT_TRUE(done);
    EXPECT_EQ(events.size(), 4u);
}

TEST_F(ServeHardening, StreamedTextOffsetIsCumulative) {
    json req = {{"prompt", "class "}, {"max_tokens", 8}, {"stream", true}, {"logprobs", 1}, {"ignore_eos", true}};
    auto events = test::sse_events(post("/v1/completions", req.dump()).second.get<std::string>());
    size_t text_so_far = 0;
    for (const auto& e : events) {
        ASSERT_EQ(e["choices"].size(), 1u) << e;
        const json& lp = e["choices"][0]["logprobs"];
        for (size_t t = 0; t < lp["text_offset"].size(); ++t) {
            EXPECT_EQ(lp["text_offset"][t].get<size_t>(), text_so_far);
            text_so_far += lp["tokens"][t].get<std::string>().size();
        }
    }
    EXPECT_GT(text_so_far, 0u);
}

TEST_F(ServeHardening, TokenizeAndDetokenizeRoundTrip) {
    auto [status, tok] = post("/tokenize", R"({"prompt": "def fib(n):\n    return n"})");
    ASSERT_EQ(status, 200) << tok;
    EXPECT_EQ(tok["count"], tok["tokens"].size());
    EXPECT_EQ(tok["max_model_len"], 8192);
    auto [status2, completion] = post("/v1/completions", json{{"prompt", "def fib(n):\n    return n"}, {"max_tokens", 1}}.dump());
    ASSERT_EQ(status2, 200);
    EXPECT_EQ(completion["usage"]["prompt_tokens"], tok["count"]);
    auto [status3, text] = post("/detokenize", json{{"tokens", tok["tokens"]}}.dump());
    ASSERT_EQ(status3, 200) << text;
    EXPECT_NE(text["prompt"].get<std::string>().find("def fib(n):\n    return n"), std::string::npos);
    EXPECT_EQ(post("/detokenize", R"({"tokens": [4294967301]})").first, 400);
}

TEST_F(ServeHardening, SequencesPerRequestAreCapped) {
    json prompts = json::array();
    for (int i = 0; i < 20000; ++i) prompts.push_back("p");
    auto [status, reply] = post("/v1/completions", json{{"prompt", prompts}, {"n", 128}, {"max_tokens", 1}}.dump());
    EXPECT_EQ(status, 400);
    EXPECT_NE(reply.dump().find("at most 256 sequences"), std::string::npos) << reply;  // the default cap
}

}  // namespace
}  // namespace deepinfer
