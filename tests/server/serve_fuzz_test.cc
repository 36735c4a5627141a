// A request fuzzer against `deepinfer serve` (the bundled model): thousands of random mutations of
// valid requests (JSON types, nesting, sizes, number extremes, invalid UTF-8, truncation, HTTP
// framing) must never get a 5xx or crash the server, and leave it healthy. `make test` also runs
// it against a build with AddressSanitizer and UBSan (scripts/asan_fuzz.sh), whose reports make
// the server exit non-zero, which this test checks.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "tests/server/serve_process.h"

namespace deepinfer {
namespace {

using nlohmann::json;

const std::vector<std::pair<std::string, json>>& seeds() {
    static const std::vector<std::pair<std::string, json>> s = {
        {"/v1/completions", {{"prompt", "def f(x):"}, {"max_tokens", 4}, {"temperature", 0}}},
        {"/v1/completions", {{"prompt", {"a", "b"}}, {"max_tokens", 3}, {"n", 2}, {"logprobs", 2}, {"seed", 5}, {"echo", true}}},
        {"/v1/completions", {{"prompt", {1, 2, 3}}, {"max_tokens", 3}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}},
        {"/v1/completions", {{"prompt", "x"}, {"max_tokens", 4}, {"best_of", 2}, {"stop", {"\n", "a"}}, {"logit_bias", {{"5", -1}}}}},
        {"/v1/chat/completions",
         {{"messages", {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4}}},
        {"/v1/chat/completions",
         {{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "hello"}}}}}}},
          {"max_completion_tokens", 3}, {"stream", true}, {"logprobs", true}, {"top_logprobs", 2}}},
        {"/v1/chat/completions",
         {{"messages",
           {{{"role", "user"}, {"content", "weather?"}},
            {{"role", "assistant"}, {"content", ""},
             {"tool_calls", {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "w"}, {"arguments", "{\"a\":1}"}}}}}}},
            {{"role", "tool"}, {"content", "sunny"}, {"tool_call_id", "c1"}}}},
          {"tools", {{{"type", "function"}, {"function", {{"name", "w"}, {"parameters", {{"type", "object"}}}}}}}},
          {"max_tokens", 4}, {"thinking", true}}},
        {"/tokenize", {{"prompt", "import os"}}},
        {"/detokenize", {{"tokens", {1, 2, 3}}}},
    };
    return s;
}

json random_leaf(std::mt19937_64& rng) {
    switch (rng() % 12) {
        case 0: return nullptr;
        case 1: return static_cast<bool>(rng() % 2);
        case 2: return static_cast<int64_t>(rng());
        case 3: return static_cast<uint64_t>(rng());
        case 4: return -1;
        case 5: return 1e308;
        case 6: return -0.5;
        case 7: return std::string(rng() % 3 == 0 ? 100000 : rng() % 40, "ab\n\"\\"[rng() % 5]);
        case 8: return json::array();
        case 9: return json::object();
        case 10: return std::string("\xff\xfe\xc3", 1 + rng() % 3);  // invalid UTF-8
        default: return json::array({1, "x", nullptr});
    }
}

// Walks to a random node of `j` and replaces, deletes, wraps or adds something there.
void mutate(json& j, std::mt19937_64& rng) {
    json* node = &j;
    for (int depth = 0; depth < 4 && (node->is_object() || node->is_array()) && !node->empty() && rng() % 3; ++depth) {
        auto it = node->begin();
        std::advance(it, static_cast<long>(rng() % node->size()));
        node = &*it;
    }
    switch (rng() % 6) {
        case 0: *node = random_leaf(rng); break;
        case 1:
            if (node->is_object() && !node->empty()) node->erase(node->begin());
            else *node = random_leaf(rng);
            break;
        case 2: {  // nesting
            int depth = 1 + static_cast<int>(rng() % 120);
            for (int d = 0; d < depth; ++d) *node = json::array({*node});
            break;
        }
        case 3:
            if (node->is_object()) (*node)["unknown_" + std::to_string(rng() % 5)] = random_leaf(rng);
            else if (node->is_array()) node->push_back(random_leaf(rng));
            break;
        case 4: {  // a long array
            json arr = json::array();
            for (int i = 0, n = static_cast<int>(rng() % 3000); i < n; ++i) arr.push_back(static_cast<int>(rng() % 5000));
            *node = arr;
            break;
        }
        default: *node = std::to_string(rng());
    }
}

// The bytes of one fuzzed HTTP request.
std::string fuzzed_request(std::mt19937_64& rng) {
    const auto& [path, seed] = seeds()[rng() % seeds().size()];
    json body = seed;
    for (int m = 0, n = 1 + static_cast<int>(rng() % 3); m < n; ++m) mutate(body, rng);
    std::string text = body.dump(-1, ' ', false, json::error_handler_t::ignore);
    switch (rng() % 10) {
        case 0: text = text.substr(0, rng() % (text.size() + 1)); break;             // truncated
        case 1: if (!text.empty()) text[rng() % text.size()] = static_cast<char>(rng()); break;  // a flipped byte
        case 2: text = std::string(1 + rng() % 400, '[') + text; break;               // unbalanced nesting
        default: break;
    }
    std::string method = rng() % 20 == 0 ? "GET" : "POST";
    std::string headers = rng() % 4 == 0 ? "Content-Type: text/plain\r\n" : "";
    if (rng() % 30 == 0) headers += "Transfer-Encoding: chunked\r\n";  // with a Content-Length too: malformed
    return method + " " + path + " HTTP/1." + (rng() % 10 == 0 ? "0" : "1") + "\r\nHost: x\r\nConnection: close\r\n" + headers +
           "Content-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text;
}

TEST(ServeFuzz, MutatedRequestsNeverGet5xxOrCrash) {
    uint64_t seed = std::getenv("DEEPINFER_FUZZ_SEED") ? std::strtoull(std::getenv("DEEPINFER_FUZZ_SEED"), nullptr, 10) : std::random_device{}();
    int cases = std::getenv("DEEPINFER_FUZZ_CASES") ? std::atoi(std::getenv("DEEPINFER_FUZZ_CASES")) : 3000;
    SCOPED_TRACE("DEEPINFER_FUZZ_SEED=" + std::to_string(seed));
    test::ServeProcess server({"--model", test::nano_model_dir(), "--max-model-len", "256", "--shutdown-grace", "5"});
    ASSERT_GT(server.port(), 0);
    std::mt19937_64 rng(seed);
    for (int i = 0; i < cases; ++i) {
        std::string request = fuzzed_request(rng);
        auto r = test::raw_request(server.port(), request, 60);
        ASSERT_TRUE(r.status > 0 && r.status < 500) << "case " << i << ": HTTP " << r.status << " (0: no answer) "
                                                    << r.body.substr(0, 300) << "\nrequest: " << request.substr(0, 600);
        ASSERT_EQ(r.body.find("\"code\":500"), std::string::npos) << "case " << i << ": " << r.body.substr(0, 300);
        if (i % 500 == 499) {
            ASSERT_EQ(test::raw_request(server.port(), test::http_get("/health")).status, 200) << "after case " << i;
        }
    }
    auto m = test::raw_request(server.port(), test::http_get("/metrics"));
    EXPECT_EQ(m.body.find("status=\"5"), std::string::npos) << m.body;
    auto [status, seconds] = server.terminate(60);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the server did not exit cleanly (sanitizer report?): " << status;
}

}  // namespace
}  // namespace deepinfer
