#pragma once
// OpenAI request parsing and response building for /v1/completions and /v1/chat/completions.
// Parsing checks every field's type and range and returns an ApiError (HTTP 400, OpenAI error
// body) naming the first bad field.
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/engine.h"
#include "tokenizer/chat_encoding.h"

namespace deepinfer::server {

struct ApiError {
    int status = 400;
    std::string message;
    std::string param;
    std::string type = "invalid_request_error";
    nlohmann::json body() const;
};

struct CompletionCall {
    bool chat = false;
    bool stream = false;
    bool include_usage = true;
    bool thinking = false;           // chat: the prompt ends with <think>; output split into reasoning
    bool has_tools = false;
    bool echo = false;               // completions: prepend the prompt to the text
    int top_logprobs = -1;           // chat: -1 = no logprobs; completions: `logprobs`
    std::string model;
    std::vector<GenerationRequest> requests;  // completions may carry several prompts
};

struct ServingInfo {
    std::string model_name;
    int32_t vocab_size = 0;
    int64_t max_model_len = 0;
};

// `tokenize` turns prompt text into ids (BOS per the tokenizer config) or throws.
using Tokenize = std::function<std::vector<int32_t>(const std::string&, bool add_special_tokens)>;

std::variant<CompletionCall, ApiError> parse_completion_call(const std::string& body, bool chat, const ServingInfo& info,
                                                             const Tokenize& tokenize);

// Builds the chat messages of a request body (exposed for tests).
std::vector<tokenizer::ChatMessage> parse_messages(const nlohmann::json& messages);

}  // namespace deepinfer::server
