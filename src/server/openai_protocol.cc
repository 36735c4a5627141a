#include "server/openai_protocol.h"

#include <map>
#include <optional>

#include "base/error.h"
#include "server/request_fields.h"
#include "server/structured_output.h"
#include "tokenizer/tool_call_grammar.h"

namespace deepinfer::server {
namespace {

using nlohmann::json;

// Fields of both endpoints; each is honoured (or refused with a reason) below.
#define DI_COMMON_FIELDS                                                                                              \
    "model", "stream", "stream_options", "temperature", "top_p", "top_k", "min_p", "n", "stop", "stop_token_ids",   \
        "max_tokens", "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "seed", "user",  \
        "ignore_eos", "skip_special_tokens", "logprobs", "deterministic", DI_STRUCTURED_FIELDS

std::vector<std::string> stop_strings(const json& j) {
    auto it = j.find("stop");
    if (it == j.end() || it->is_null()) return {};
    if (it->is_string()) return {it->get<std::string>()};
    if (!it->is_array()) throw BadField{"stop", "stop must be a string or an array of strings"};
    std::vector<std::string> out;
    for (const auto& s : *it) {
        if (!s.is_string()) throw BadField{"stop", "stop must be a string or an array of strings"};
        out.push_back(s.get<std::string>());
    }
    return out;
}

// A token id from JSON, checked against the vocabulary (ids beyond 32 bits must not wrap).
int32_t token_id(const json& t, int32_t vocab_size, const char* param) {
    if (!t.is_number_integer()) throw BadField{param, std::string(param) + " must hold integer token ids"};
    bool in_range = t.is_number_unsigned() ? t.get<uint64_t>() < static_cast<uint64_t>(vocab_size)
                                           : t.get<int64_t>() >= 0 && t.get<int64_t>() < vocab_size;
    if (!in_range) throw BadField{param, std::string(param) + " token id " + t.dump() + " is out of range [0, " + std::to_string(vocab_size) + ")"};
    return static_cast<int32_t>(t.get<int64_t>());
}

std::map<int32_t, float> logit_bias(const json& j, int32_t vocab_size) {
    std::map<int32_t, float> out;
    auto it = j.find("logit_bias");
    if (it == j.end() || it->is_null()) return out;
    if (!it->is_object()) throw BadField{"logit_bias", "logit_bias must be an object of token id -> bias"};
    for (const auto& [k, v] : it->items()) {
        json id = json::parse(k, nullptr, false);
        if (id.is_discarded() || !id.is_number_integer() || !v.is_number())
            throw BadField{"logit_bias", "logit_bias must map token ids to numbers"};
        out[token_id(id, vocab_size, "logit_bias")] = v.get<float>();
    }
    return out;
}

SamplingParams sampling_from(const json& j, bool chat, int32_t vocab_size) {
    SamplingParams p;
    if (auto v = get_field<int>(j, chat ? "max_completion_tokens" : "max_tokens", "an integer")) p.max_tokens = *v;
    else if (auto v2 = get_field<int>(j, "max_tokens", "an integer")) p.max_tokens = *v2;
    if (auto v = get_field<double>(j, "temperature", "a number")) p.temperature = static_cast<float>(*v);
    if (auto v = get_field<double>(j, "top_p", "a number")) p.top_p = static_cast<float>(*v);
    if (auto v = get_field<int>(j, "top_k", "an integer")) p.top_k = *v == -1 ? 0 : *v;
    if (auto v = get_field<double>(j, "min_p", "a number")) p.min_p = static_cast<float>(*v);
    if (auto v = get_field<double>(j, "presence_penalty", "a number")) p.presence_penalty = static_cast<float>(*v);
    if (auto v = get_field<double>(j, "frequency_penalty", "a number")) p.frequency_penalty = static_cast<float>(*v);
    if (auto v = get_field<double>(j, "repetition_penalty", "a number")) p.repetition_penalty = static_cast<float>(*v);
    if (auto v = get_field<int64_t>(j, "seed", "an integer")) p.seed = static_cast<uint64_t>(*v);
    if (auto v = get_field<int>(j, "n", "an integer")) p.n = *v;
    if (auto v = get_field<bool>(j, "ignore_eos", "a boolean")) p.ignore_eos = *v;
    if (auto v = get_field<bool>(j, "skip_special_tokens", "a boolean")) p.skip_special_tokens = *v;
    (void)get_field<std::string>(j, "user", "a string");  // an end-user id for abuse tracking; nothing to do here
    p.stop = stop_strings(j);
    if (auto it = j.find("stop_token_ids"); it != j.end() && !it->is_null()) {
        if (!it->is_array()) throw BadField{"stop_token_ids", "stop_token_ids must be an array of token ids"};
        for (const auto& t : *it) p.stop_token_ids.push_back(token_id(t, vocab_size, "stop_token_ids"));
    }
    p.logit_bias = logit_bias(j, vocab_size);
    return p;
}

std::vector<std::vector<int32_t>> completion_prompts(const json& j, int32_t vocab_size, const Tokenize& tokenize) {
    if (!j.contains("prompt")) throw BadField{"prompt", "prompt is required"};
    const json& p = j["prompt"];
    const char* shape = "prompt must be a string, an array of strings, an array of token ids or an array of those";
    auto ids = [&](const json& arr) {
        std::vector<int32_t> out;
        for (const auto& t : arr) out.push_back(token_id(t, vocab_size, "prompt"));
        return out;
    };
    if (p.is_string()) return {tokenize(p.get<std::string>(), true)};
    if (!p.is_array() || p.empty()) throw BadField{"prompt", shape};
    if (p[0].is_number()) return {ids(p)};
    std::vector<std::vector<int32_t>> out;
    for (const auto& e : p) {
        if (e.is_string()) out.push_back(tokenize(e.get<std::string>(), true));
        else if (e.is_array()) out.push_back(ids(e));
        else throw BadField{"prompt", shape};
    }
    return out;
}

void set_structured_output(CompletionCall& call, StructuredOutput out) {
    call.grammar = std::move(out.grammar);
    call.grammar_param = std::move(out.param);
}

// tool_choice "required" or a named function: the output is a DSML tool-calls block whose
// arguments satisfy the tool's parameter schema.
void force_tool_call(CompletionCall& call, const std::vector<tokenizer::ChatTool>& tools, const ToolChoice& choice, bool thinking) {
    if (call.grammar.active())
        throw BadField{"tool_choice", "tool_choice cannot force a tool call together with " + call.grammar_param};
    tokenizer::ToolCallGrammarOptions options{choice.function, thinking, call.parallel_tool_calls};
    try {
        call.grammar = {GrammarSpec::Kind::kEbnf, tokenizer::tool_call_grammar(tools, options)};
    } catch (const std::exception& e) {  // deepinfer::Error names the problem; a JSON type error too
        throw BadField{"tool_choice", std::string("tool_choice: ") + e.what()};
    }
    call.grammar_param = "tool_choice";
}

std::vector<int32_t> chat_prompt(const json& j, CompletionCall& call, const std::optional<std::string>& prompt_schema,
                                 const Tokenize& tokenize) {
    reject_unknown_fields(j, {DI_COMMON_FIELDS, "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                              "parallel_tool_calls", "response_format", "reasoning_effort", "thinking", "chat_template_kwargs"});
    if (get_field<bool>(j, "logprobs", "a boolean").value_or(false))
        call.top_logprobs = get_field<int>(j, "top_logprobs", "an integer").value_or(0);
    else if (j.contains("top_logprobs") && !j["top_logprobs"].is_null())
        throw BadField{"top_logprobs", "top_logprobs needs logprobs: true"};
    tokenizer::ChatOptions opt;
    if (auto v = get_field<bool>(j, "thinking", "a boolean")) opt.thinking = *v;
    if (auto k = j.find("chat_template_kwargs"); k != j.end() && !k->is_null()) {
        if (!k->is_object()) throw BadField{"chat_template_kwargs", "chat_template_kwargs must be an object"};
        reject_unknown_fields(*k, {"thinking", "enable_thinking"}, "chat_template_kwargs.");
        if (auto v = get_field<bool>(*k, "thinking", "a boolean", "chat_template_kwargs.")) opt.thinking = *v;
        if (auto v = get_field<bool>(*k, "enable_thinking", "a boolean", "chat_template_kwargs.")) opt.thinking = *v;
    }
    call.thinking = opt.thinking;
    opt.reasoning_effort = get_field<std::string>(j, "reasoning_effort", "a string").value_or("");
    if (!opt.reasoning_effort.empty() && opt.reasoning_effort != "high" && opt.reasoning_effort != "max" &&
        opt.reasoning_effort != "low" && opt.reasoning_effort != "medium")
        throw BadField{"reasoning_effort", "reasoning_effort must be low, medium, high or max"};
    opt.response_format = prompt_schema;
    std::vector<tokenizer::ChatTool> tools = parse_tools(j);
    ToolChoice choice = parse_tool_choice(j, tools);
    if (choice.kind == ToolChoice::Kind::kNone) tools.clear();
    call.has_tools = !tools.empty();
    call.parallel_tool_calls = get_field<bool>(j, "parallel_tool_calls", "a boolean").value_or(true);
    if (choice.forces_call()) force_tool_call(call, tools, choice, opt.thinking);
    if (!j.contains("messages")) throw BadField{"messages", "messages is required"};
    return tokenize(tokenizer::encode_chat(parse_messages(j["messages"]), tools, opt), false);  // the encoding has its BOS
}

std::vector<std::vector<int32_t>> completions_prompts(const json& j, CompletionCall& call, SamplingParams& sampling,
                                                      int32_t vocab_size, const Tokenize& tokenize) {
    reject_unknown_fields(j, {DI_COMMON_FIELDS, "prompt", "echo", "best_of", "suffix"});
    if (j.contains("suffix") && !j["suffix"].is_null())
        throw BadField{"suffix", "suffix is not supported (this model has no fill-in-the-middle format)"};
    if (auto v = get_field<int>(j, "logprobs", "an integer")) call.top_logprobs = *v;
    call.echo = get_field<bool>(j, "echo", "a boolean").value_or(false);
    if (call.echo && call.top_logprobs >= 0)
        throw BadField{"echo", "echo with logprobs is not supported (prompt logprobs are not computed)"};
    if (auto v = get_field<int>(j, "best_of", "an integer")) {
        if (*v < sampling.n) throw BadField{"best_of", "best_of must be at least n"};
        if (*v > sampling.n && call.stream) throw BadField{"best_of", "best_of cannot be used with stream"};
        if (*v > sampling.n) call.best_of = *v;
    }
    return completion_prompts(j, vocab_size, tokenize);
}

// Prompt + max_tokens must fit the model's context; without max_tokens, the output may use the
// rest of the context (up to the default).
std::optional<ApiError> fit_context(const std::vector<int32_t>& ids, SamplingParams& p, bool max_tokens_given,
                                    const ServingInfo& info, bool chat) {
    const char* param = chat ? "messages" : "prompt";
    if (ids.empty()) return ApiError{400, "prompt is empty", "prompt"};
    int64_t room = info.max_model_len - static_cast<int64_t>(ids.size());
    if (room < 1 || (max_tokens_given && p.max_tokens > room))
        return ApiError{400,
                        "this model's maximum context length is " + std::to_string(info.max_model_len) + " tokens; the prompt has " +
                            std::to_string(ids.size()) + " tokens" +
                            (max_tokens_given ? " and max_tokens is " + std::to_string(p.max_tokens) : std::string()),
                        param, "invalid_request_error", "context_too_long"};
    if (!max_tokens_given) p.max_tokens = static_cast<int>(std::min<int64_t>(p.max_tokens, room));
    return std::nullopt;
}

std::variant<json, ApiError> parse_body(const std::string& body, const ServingInfo& info) {
    if (json_nesting_exceeds(body, info.max_json_depth))
        return ApiError{400, "request JSON nests deeper than " + std::to_string(info.max_json_depth) + " levels", "",
                        "invalid_request_error", "nesting_too_deep"};
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded()) return ApiError{400, "request body is not valid JSON", ""};
    if (!j.is_object()) return ApiError{400, "request body must be a JSON object", ""};
    return j;
}

// The request's model (the served one when absent); another name is a 404.
std::string checked_model(const json& j, const ServingInfo& info) {
    std::string model = get_field<std::string>(j, "model", "a string").value_or(info.model_name);
    if (model != info.model_name)
        throw ApiError{404, "model '" + model + "' does not exist (serving '" + info.model_name + "')", "model", "not_found_error"};
    return model;
}

// Parses `body` and runs `f` on it; whatever `f` throws about the request becomes its ApiError.
template <typename F>
auto with_body(const std::string& body, const ServingInfo& info, F&& f) -> std::variant<decltype(f(json())), ApiError> {
    auto parsed = parse_body(body, info);
    if (auto* err = std::get_if<ApiError>(&parsed)) return *err;
    try {
        return f(std::get<json>(parsed));
    } catch (const BadField& b) {
        return ApiError{400, b.message, b.param};
    } catch (const ApiError& e) {
        return e;
    } catch (const Error& e) {
        return ApiError{400, e.what(), ""};
    }
}

CompletionCall build_call(const json& j, const std::string& body, bool chat, const ServingInfo& info, const Tokenize& tokenize) {
    CompletionCall call;
    call.chat = chat;
    call.model = checked_model(j, info);
    call.stream = get_field<bool>(j, "stream", "a boolean").value_or(false);
    if (auto so = j.find("stream_options"); so != j.end() && !so->is_null()) {
        if (!so->is_object()) throw BadField{"stream_options", "stream_options must be an object"};
        reject_unknown_fields(*so, {"include_usage", "continuous_usage_stats"}, "stream_options.");
        call.include_usage = get_field<bool>(*so, "include_usage", "a boolean", "stream_options.").value_or(false);
    }
    SamplingParams sampling = sampling_from(j, chat, info.vocab_size);
    bool deterministic = get_field<bool>(j, "deterministic", "a boolean").value_or(false);
    if (deterministic && !info.deterministic_available)
        throw BadField{"deterministic", "deterministic needs batch-invariant kernels: on this server's device, start "
                                        "it with --deterministic"};
    std::vector<std::vector<int32_t>> prompts;
    StructuredOutput structured = parse_structured_output(j, body);
    std::optional<std::string> prompt_schema = structured.prompt_schema;
    set_structured_output(call, std::move(structured));
    if (chat) prompts.push_back(chat_prompt(j, call, prompt_schema, tokenize));
    else prompts = completions_prompts(j, call, sampling, info.vocab_size, tokenize);
    sampling.logprobs = call.top_logprobs;
    call.n = sampling.n;
    if (call.best_of > 0) sampling.logprobs = std::max(sampling.logprobs, 0), sampling.n = call.best_of;
    auto given = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };
    bool max_tokens_given = given("max_tokens") || (chat && given("max_completion_tokens"));
    for (auto& ids : prompts) {
        SamplingParams p = sampling;
        if (auto err = fit_context(ids, p, max_tokens_given, info, chat)) throw *err;
        GenerationRequest r;
        r.prompt_tokens = std::move(ids);
        r.sampling = std::move(p);
        r.grammar = call.grammar;
        r.deterministic = deterministic;
        call.requests.push_back(std::move(r));
    }
    return call;
}

}  // namespace

json ApiError::body() const {
    return {{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json() : json(param)}, {"code", status}}}};
}

std::variant<CompletionCall, ApiError> parse_completion_call(const std::string& body, bool chat, const ServingInfo& info,
                                                             const Tokenize& tokenize, const CheckGrammar& check_grammar) {
    return with_body(body, info, [&](const json& j) {
        CompletionCall call = build_call(j, body, chat, info, tokenize);
        if (call.grammar.active() && check_grammar) {
            std::string bad = check_grammar(call.grammar);
            if (!bad.empty()) throw BadField{call.grammar_param, call.grammar_param + ": " + bad};
        }
        std::string bad = call.requests[0].sampling.validate(info.vocab_size);
        if (!bad.empty()) throw ApiError{400, bad, ""};
        int64_t sequences = static_cast<int64_t>(call.requests.size()) * call.choices_per_request();
        if (sequences > info.max_sequences_per_request)
            throw ApiError{400,
                           "a request may ask for at most " + std::to_string(info.max_sequences_per_request) +
                               " sequences (prompts x n x best_of); this one asks for " + std::to_string(sequences),
                           "n", "invalid_request_error", "too_many_sequences"};
        return call;
    });
}

std::variant<json, ApiError> tokenize_request(const std::string& body, const ServingInfo& info, const Tokenize& tokenize) {
    return with_body(body, info, [&](const json& j) {
        reject_unknown_fields(j, {"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt"});
        checked_model(j, info);
        bool special = get_field<bool>(j, "add_special_tokens", "a boolean").value_or(true);
        (void)get_field<bool>(j, "add_generation_prompt", "a boolean");  // the chat encoding always ends with the reply's start
        std::vector<int32_t> ids;
        if (j.contains("messages")) ids = tokenize(tokenizer::encode_chat(parse_messages(j["messages"]), {}, {}), false);
        else ids = tokenize(required_string(j, "prompt", ""), special);
        return json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", info.max_model_len}};
    });
}

std::variant<json, ApiError> detokenize_request(const std::string& body, const ServingInfo& info, const Detokenize& detokenize) {
    return with_body(body, info, [&](const json& j) {
        reject_unknown_fields(j, {"model", "tokens"});
        checked_model(j, info);
        auto it = j.find("tokens");
        if (it == j.end() || !it->is_array()) throw BadField{"tokens", "tokens must be an array of token ids"};
        std::vector<int32_t> ids;
        for (const auto& t : *it) ids.push_back(token_id(t, info.vocab_size, "tokens"));
        return json{{"prompt", detokenize(ids)}};
    });
}

}  // namespace deepinfer::server
