#pragma once
// OpenAI request parsing for /v1/completions and /v1/chat/completions, and the vLLM-compatible
// /tokenize and /detokenize. Parsing checks every field's type and range, refuses fields it does
// not know, enforces the server's limits (nesting, context length, token ids, sequences per
// request) and returns an ApiError (HTTP 4xx, OpenAI error body) naming the first problem.
#include <functional>
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
    // Counted in /metrics as deepinfer_rejected_total{reason}; empty = a plain bad request.
    std::string reason;
    nlohmann::json body() const;
};

struct CompletionCall {
    bool chat = false;
    bool stream = false;
    bool include_usage = false;      // streaming: a final usage chunk (stream_options.include_usage)
    bool thinking = false;           // chat: the prompt ends with <think>; output split into reasoning
    bool has_tools = false;
    bool parallel_tool_calls = true; // false: only the first parsed tool call is returned
    bool echo = false;               // completions: prepend the prompt's text
    int top_logprobs = -1;           // chat: -1 = no logprobs; completions: `logprobs`
    int best_of = 0;                 // completions: sample this many, return the n most likely (0 = n)
    int n = 1;                       // choices returned per prompt
    std::string model;
    GrammarSpec grammar;             // structured output of every request (response_format, guided_*, tool_choice)
    std::string grammar_param;       // the request field that asked for it
    std::vector<GenerationRequest> requests;  // completions may carry several prompts
    int choices_per_request() const { return requests.empty() ? 1 : requests[0].sampling.n; }
};

struct ServingInfo {
    std::string model_name;
    int32_t vocab_size = 0;
    int64_t max_model_len = 0;
    int max_sequences_per_request = 256;
    int max_json_depth = 64;
    bool deterministic_available = false;  // requests may set `deterministic` (Engine::deterministic_available)
};

// `tokenize` turns prompt text into ids (BOS per the tokenizer config) or throws.
using Tokenize = std::function<std::vector<int32_t>(const std::string&, bool add_special_tokens)>;

// `check_grammar` compiles a structured-output grammar: "" when usable, else the problem (a 400
// naming the field). Without it grammars are not checked here (the engine reports them).
using CheckGrammar = std::function<std::string(const GrammarSpec&)>;

std::variant<CompletionCall, ApiError> parse_completion_call(const std::string& body, bool chat, const ServingInfo& info,
                                                             const Tokenize& tokenize, const CheckGrammar& check_grammar = nullptr);

// POST /tokenize ({"prompt": text | "messages": [...], "add_special_tokens"}) -> {"tokens",
// "count", "max_model_len"}; POST /detokenize ({"tokens": [...]}) -> {"prompt"}.
using Detokenize = std::function<std::string(const std::vector<int32_t>&)>;
std::variant<nlohmann::json, ApiError> tokenize_request(const std::string& body, const ServingInfo& info, const Tokenize& tokenize);
std::variant<nlohmann::json, ApiError> detokenize_request(const std::string& body, const ServingInfo& info,
                                                          const Detokenize& detokenize);

// Chat request parts (exposed for tests); throw BadField (request_fields.h).
std::vector<tokenizer::ChatMessage> parse_messages(const nlohmann::json& messages);
std::vector<tokenizer::ChatTool> parse_tools(const nlohmann::json& body);

}  // namespace deepinfer::server
