#pragma once
// Helpers of the cluster tests: `deepinfer serve` instances of the bundled model set up so that a
// prompt continued from shipped or cached state computes exactly what a whole computation does,
// token-id prompts, greedy completions compared as text plus log-probabilities, and /metrics.
#include <gtest/gtest.h>
#include <httplib.h>

#include <future>
#include <random>
#include <regex>

#include "tests/server/serve_process.h"

namespace deepinfer::test {

using nlohmann::json;

// Exact replay for the nano model (layers x (window - 1) + 1): a prompt continued from shipped
// state then computes the same numbers as one computed whole (prefix_cache_util.h).
inline std::vector<std::string> instance_args(std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {"--model", nano_model_dir(), "--block-size", "16", "--swa-replay-tokens", "379",
                                  "--max-batch-tokens", "256", "--max-sequences", "8"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}

inline httplib::Client client(int port) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(300, 0);
    c.set_connection_timeout(30, 0);
    return c;
}

// Token-id prompts of 700..1000 tokens (a few prefix-cache spans of 256); the even ones share
// their first 600 (two spans: a hit past the 379-token replay).
inline std::vector<json> make_prompts(int count, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int> shared(600);
    for (auto& t : shared) t = 2 + static_cast<int>(rng() % 4000);
    std::vector<json> prompts;
    for (int i = 0; i < count; ++i) {
        std::vector<int> p = i % 2 == 0 ? shared : std::vector<int>{};
        size_t len = 700 + rng() % 300;
        while (p.size() < len) p.push_back(2 + static_cast<int>(rng() % 4000));
        prompts.emplace_back(p);
    }
    return prompts;
}

// The greedy completion's text and log-probabilities, or the error.
inline json complete(int port, const json& prompt, const httplib::Headers& headers = {}) {
    json body = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"logprobs", 1}, {"ignore_eos", true}};
    auto r = client(port).Post("/v1/completions", headers, body.dump(), "application/json");
    if (!r) return {{"error", "no response"}};
    json j = json::parse(r->body, nullptr, false);
    if (r->status != 200 || !j.contains("choices")) return {{"error", r->body}};
    return {{"text", j["choices"][0]["text"]}, {"logprobs", j["choices"][0]["logprobs"]["token_logprobs"]}};
}

inline std::vector<json> complete_all(int port, const std::vector<json>& prompts, const httplib::Headers& headers = {}) {
    std::vector<std::future<json>> calls;
    for (const auto& p : prompts) calls.push_back(std::async(std::launch::async, [&, p] { return complete(port, p, headers); }));
    std::vector<json> out;
    for (auto& c : calls) out.push_back(c.get());
    return out;
}

inline double metric(int port, const std::string& series) {
    auto r = client(port).Get("/metrics");
    if (!r) return -1;
    std::smatch m;
    std::regex line("(^|\n)" + std::regex_replace(series, std::regex(R"([{}\\"])"), R"(\$&)") + R"((\{[^}]*\})? ([0-9.e+-]+))");
    return std::regex_search(r->body, m, line) ? std::stod(m[3].str()) : 0;
}

}  // namespace deepinfer::test
