// Request parsing: fields map onto sampling parameters; prompts in every accepted shape.
#include "server/openai_protocol.h"

#include <gtest/gtest.h>

namespace deepinfer::server {
namespace {

ServingInfo info() { return {"m", 1000, 500}; }
std::vector<int32_t> fake_tokenize(const std::string& s, bool special) {
    std::vector<int32_t> ids;
    if (special) ids.push_back(0);
    for (unsigned char c : s) ids.push_back(c);
    return ids;
}

TEST(Protocol, CompletionFieldsMapToSamplingParams) {
    auto r = parse_completion_call(R"({"model": "m", "prompt": "ab", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
        "top_k": 40, "min_p": 0.1, "presence_penalty": 0.5, "frequency_penalty": -0.5, "seed": 9, "n": 2, "stop": "x",
        "logprobs": 3, "logit_bias": {"5": -100}, "user": "u", "stream": true})", false, info(), fake_tokenize);
    ASSERT_TRUE(std::holds_alternative<CompletionCall>(r)) << std::get<ApiError>(r).message;
    const auto& c = std::get<CompletionCall>(r);
    ASSERT_EQ(c.requests.size(), 1u);
    const SamplingParams& p = c.requests[0].sampling;
    EXPECT_EQ(c.requests[0].prompt_tokens, (std::vector<int32_t>{0, 'a', 'b'}));
    EXPECT_EQ(p.max_tokens, 7);
    EXPECT_FLOAT_EQ(p.temperature, 0.5f);
    EXPECT_EQ(p.top_k, 40);
    EXPECT_EQ(p.n, 2);
    EXPECT_EQ(*p.seed, 9u);
    EXPECT_EQ(p.stop, std::vector<std::string>{"x"});
    EXPECT_EQ(p.logprobs, 3);
    EXPECT_FLOAT_EQ(p.logit_bias.at(5), -100.0f);
    EXPECT_TRUE(c.stream);
}

// `deterministic` reaches every request of the call where the engine can honour it, and is a
// 400 naming the field where it cannot (a device whose kernels are not batch-invariant).
TEST(Protocol, DeterministicIsPerRequestAndRefusedWhereUnavailable) {
    ServingInfo cpu = info();
    cpu.deterministic_available = true;
    auto r = parse_completion_call(R"({"prompt": ["a", "b"], "deterministic": true})", false, cpu, fake_tokenize);
    ASSERT_TRUE(std::holds_alternative<CompletionCall>(r)) << std::get<ApiError>(r).message;
    for (const auto& q : std::get<CompletionCall>(r).requests) EXPECT_TRUE(q.deterministic);
    auto chat = parse_completion_call(R"({"messages": [{"role": "user", "content": "hi"}], "deterministic": false})", true,
                                      cpu, fake_tokenize);
    ASSERT_TRUE(std::holds_alternative<CompletionCall>(chat));
    EXPECT_FALSE(std::get<CompletionCall>(chat).requests[0].deterministic);
    auto refused = parse_completion_call(R"({"prompt": "a", "deterministic": true})", false, info(), fake_tokenize);
    ASSERT_TRUE(std::holds_alternative<ApiError>(refused));
    EXPECT_EQ(std::get<ApiError>(refused).status, 400);
    EXPECT_EQ(std::get<ApiError>(refused).param, "deterministic");
    auto bad = parse_completion_call(R"({"prompt": "a", "deterministic": "yes"})", false, cpu, fake_tokenize);
    ASSERT_TRUE(std::holds_alternative<ApiError>(bad));
    EXPECT_EQ(std::get<ApiError>(bad).param, "deterministic");
}

TEST(Protocol, PromptShapes) {
    auto ids = parse_completion_call(R"({"prompt": [3, 4, 5]})", false, info(), fake_tokenize);
    EXPECT_EQ(std::get<CompletionCall>(ids).requests[0].prompt_tokens, (std::vector<int32_t>{3, 4, 5}));
    auto many = parse_completion_call(R"({"prompt": ["a", "bc"]})", false, info(), fake_tokenize);
    EXPECT_EQ(std::get<CompletionCall>(many).requests.size(), 2u);
    auto chat = parse_completion_call(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "max_completion_tokens": 4, "chat_template_kwargs": {"thinking": true}})", true, info(), fake_tokenize);
    ASSERT_TRUE(std::holds_alternative<CompletionCall>(chat));
    EXPECT_TRUE(std::get<CompletionCall>(chat).thinking);
    EXPECT_EQ(std::get<CompletionCall>(chat).requests[0].sampling.max_tokens, 4);
}

TEST(Protocol, ErrorsNameTheField) {
    auto err = [&](const std::string& body, bool chat = false) {
        auto r = parse_completion_call(body, chat, info(), fake_tokenize);
        return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{0, "", ""};
    };
    EXPECT_EQ(err(R"({"prompt": "x", "n": 1.5})").param, "n");
    EXPECT_EQ(err(R"({"prompt": "x", "stop": [1]})").param, "stop");
    EXPECT_EQ(err(R"({"prompt": "x", "logit_bias": {"a": 1}})").param, "logit_bias");
    EXPECT_EQ(err(R"({"prompt": "x", "max_tokens": 499})").param, "prompt");  // 2 + 499 > 500
    EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": 5}]})", true).param, "messages");
    EXPECT_EQ(err(R"([1, 2])").status, 400);
    ApiError image = err(R"({"messages": [{"role": "user", "content": [{"type": "image_url",
        "image_url": {"url": "data:image/png;base64,AAAA"}}]}]})", true);
    EXPECT_EQ(image.status, 400);
    EXPECT_NE(image.message.find("image inputs are not supported"), std::string::npos) << image.message;
}

}  // namespace
}  // namespace deepinfer::server
