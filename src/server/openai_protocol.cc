#include "server/openai_protocol.h"

#include <limits>

#include "base/error.h"

namespace deepinfer::server {
namespace {

using nlohmann::json;

struct BadField {
    std::string param, message;
};

template <typename T>
std::optional<T> field(const json& j, const char* name, const char* type_name) {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return std::nullopt;
    bool ok = false;
    if constexpr (std::is_same_v<T, bool>) ok = it->is_boolean();
    else if constexpr (std::is_integral_v<T>) ok = it->is_number_integer();
    else if constexpr (std::is_floating_point_v<T>) ok = it->is_number();
    else if constexpr (std::is_same_v<T, std::string>) ok = it->is_string();
    if (!ok) throw BadField{name, std::string(name) + " must be " + type_name};
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max()))
            throw BadField{name, std::string(name) + " is too large"};
    }
    return it->get<T>();
}

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

SamplingParams sampling_from(const json& j, bool chat) {
    SamplingParams p;
    if (auto v = field<int>(j, chat ? "max_completion_tokens" : "max_tokens", "an integer")) p.max_tokens = *v;
    else if (auto v2 = field<int>(j, "max_tokens", "an integer")) p.max_tokens = *v2;
    if (auto v = field<double>(j, "temperature", "a number")) p.temperature = static_cast<float>(*v);
    if (auto v = field<double>(j, "top_p", "a number")) p.top_p = static_cast<float>(*v);
    if (auto v = field<int>(j, "top_k", "an integer")) p.top_k = *v == -1 ? 0 : *v;
    if (auto v = field<double>(j, "min_p", "a number")) p.min_p = static_cast<float>(*v);
    if (auto v = field<double>(j, "presence_penalty", "a number")) p.presence_penalty = static_cast<float>(*v);
    if (auto v = field<double>(j, "frequency_penalty", "a number")) p.frequency_penalty = static_cast<float>(*v);
    if (auto v = field<double>(j, "repetition_penalty", "a number")) p.repetition_penalty = static_cast<float>(*v);
    if (auto v = field<int64_t>(j, "seed", "an integer")) p.seed = static_cast<uint64_t>(*v);
    if (auto v = field<int>(j, "n", "an integer")) p.n = *v;
    if (auto v = field<bool>(j, "ignore_eos", "a boolean")) p.ignore_eos = *v;
    if (auto v = field<bool>(j, "skip_special_tokens", "a boolean")) p.skip_special_tokens = *v;
    p.stop = stop_strings(j);
    if (j.contains("logit_bias") && !j["logit_bias"].is_null()) {
        if (!j["logit_bias"].is_object()) throw BadField{"logit_bias", "logit_bias must be an object of token id -> bias"};
        for (const auto& [k, v] : j["logit_bias"].items()) {
            size_t pos = 0;
            int id = -1;
            try {
                id = std::stoi(k, &pos);
            } catch (const std::exception&) {
            }
            if (pos != k.size() || !v.is_number()) throw BadField{"logit_bias", "logit_bias must map token ids to numbers"};
            p.logit_bias[id] = v.get<float>();
        }
    }
    if (auto v = field<std::string>(j, "user", "a string")) (void)v;  // accepted, not used
    return p;
}

tokenizer::ToolCall tool_call_from(const json& tc) {
    if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object())
        throw BadField{"messages", "tool_calls entries need a function object"};
    const json& f = tc["function"];
    tokenizer::ToolCall out;
    out.id = tc.value("id", "");
    out.name = f.value("name", "");
    if (f.contains("arguments")) out.arguments = f["arguments"].is_string() ? f["arguments"].get<std::string>() : f["arguments"].dump();
    return out;
}

std::string message_text(const json& content) {
    if (content.is_null()) return {};
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) throw BadField{"messages", "message content must be a string or an array of parts"};
    std::string text;
    for (const auto& part : content) {
        std::string type = part.is_object() ? part.value("type", "") : "";
        if (type == "image_url" || type == "input_image" || type == "image")
            throw BadField{"messages", "image inputs are not supported: this build has no vision tower (text only)"};
        if (type != "text" || !part.contains("text") || !part["text"].is_string())
            throw BadField{"messages", "only text content parts are supported"};
        text += part["text"].get<std::string>();
    }
    return text;
}

std::vector<tokenizer::ChatTool> tools_from(const json& j) {
    std::vector<tokenizer::ChatTool> tools;
    if (!j.contains("tools") || j["tools"].is_null()) return tools;
    if (!j["tools"].is_array()) throw BadField{"tools", "tools must be an array"};
    for (const auto& t : j["tools"]) {
        if (!t.is_object() || t.value("type", "function") != "function" || !t.contains("function") || !t["function"].is_object() ||
            !t["function"].contains("name"))
            throw BadField{"tools", "each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}"};
        tools.push_back({t["function"].dump()});
    }
    return tools;
}

bool thinking_flag(const json& j) {
    if (auto v = field<bool>(j, "thinking", "a boolean")) return *v;
    if (j.contains("chat_template_kwargs") && j["chat_template_kwargs"].is_object()) {
        const json& k = j["chat_template_kwargs"];
        if (auto v = field<bool>(k, "thinking", "a boolean")) return *v;
        if (auto v = field<bool>(k, "enable_thinking", "a boolean")) return *v;
    }
    return false;
}

std::vector<std::vector<int32_t>> completion_prompts(const json& j, const Tokenize& tokenize) {
    if (!j.contains("prompt")) throw BadField{"prompt", "prompt is required"};
    const json& p = j["prompt"];
    auto ids = [&](const json& arr) {
        std::vector<int32_t> out;
        for (const auto& t : arr) {
            if (!t.is_number_integer()) throw BadField{"prompt", "prompt must be a string, an array of strings or token ids"};
            out.push_back(t.get<int32_t>());
        }
        return out;
    };
    if (p.is_string()) return {tokenize(p.get<std::string>(), true)};
    if (!p.is_array() || p.empty()) throw BadField{"prompt", "prompt must be a string, an array of strings or token ids"};
    if (p[0].is_number_integer()) return {ids(p)};
    std::vector<std::vector<int32_t>> out;
    for (const auto& e : p) {
        if (e.is_string()) out.push_back(tokenize(e.get<std::string>(), true));
        else if (e.is_array()) out.push_back(ids(e));
        else throw BadField{"prompt", "prompt must be a string, an array of strings or token ids"};
    }
    return out;
}

}  // namespace

nlohmann::json ApiError::body() const {
    return {{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json() : json(param)}, {"code", status}}}};
}

std::vector<tokenizer::ChatMessage> parse_messages(const json& messages) {
    if (!messages.is_array() || messages.empty()) throw BadField{"messages", "messages must be a non-empty array"};
    std::vector<tokenizer::ChatMessage> out;
    for (const auto& m : messages) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
            throw BadField{"messages", "each message needs a string role"};
        tokenizer::ChatMessage msg;
        msg.role = m["role"].get<std::string>();
        if (msg.role != "system" && msg.role != "developer" && msg.role != "user" && msg.role != "assistant" &&
            msg.role != "tool")
            throw BadField{"messages", "unknown message role '" + msg.role + "'"};
        msg.content = message_text(m.value("content", json()));
        if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
            msg.reasoning_content = m["reasoning_content"].get<std::string>();
        if (m.contains("tool_calls") && m["tool_calls"].is_array())
            for (const auto& tc : m["tool_calls"]) msg.tool_calls.push_back(tool_call_from(tc));
        msg.tool_call_id = m.value("tool_call_id", "");
        out.push_back(std::move(msg));
    }
    return out;
}

std::variant<CompletionCall, ApiError> parse_completion_call(const std::string& body, bool chat, const ServingInfo& info,
                                                             const Tokenize& tokenize) {
    json j;
    try {
        j = json::parse(body);
    } catch (const json::exception& e) {
        return ApiError{400, std::string("request body is not valid JSON: ") + e.what(), ""};
    }
    if (!j.is_object()) return ApiError{400, "request body must be a JSON object", ""};
    try {
        CompletionCall call;
        call.chat = chat;
        call.model = field<std::string>(j, "model", "a string").value_or(info.model_name);
        if (call.model != info.model_name)
            return ApiError{400, "model '" + call.model + "' does not exist (serving '" + info.model_name + "')", "model"};
        call.stream = field<bool>(j, "stream", "a boolean").value_or(false);
        if (j.contains("stream_options") && j["stream_options"].is_object())
            call.include_usage = field<bool>(j["stream_options"], "include_usage", "a boolean").value_or(true);
        SamplingParams sampling = sampling_from(j, chat);
        std::vector<std::vector<int32_t>> prompts;
        if (chat) {
            if (field<bool>(j, "logprobs", "a boolean").value_or(false))
                call.top_logprobs = field<int>(j, "top_logprobs", "an integer").value_or(0);
            call.thinking = thinking_flag(j);
            std::vector<tokenizer::ChatTool> tools = tools_from(j);
            call.has_tools = !tools.empty();
            tokenizer::ChatOptions opt;
            opt.thinking = call.thinking;
            opt.reasoning_effort = field<std::string>(j, "reasoning_effort", "a string").value_or("");
            if (!opt.reasoning_effort.empty() && opt.reasoning_effort != "high" && opt.reasoning_effort != "max" &&
                opt.reasoning_effort != "low" && opt.reasoning_effort != "medium")
                throw BadField{"reasoning_effort", "reasoning_effort must be low, medium, high or max"};
            if (!j.contains("messages")) throw BadField{"messages", "messages is required"};
            std::string text = tokenizer::encode_chat(parse_messages(j["messages"]), tools, opt);
            prompts.push_back(tokenize(text, false));  // the encoding carries its own BOS
        } else {
            if (auto v = field<int>(j, "logprobs", "an integer")) call.top_logprobs = *v;
            call.echo = field<bool>(j, "echo", "a boolean").value_or(false);
            prompts = completion_prompts(j, tokenize);
        }
        sampling.logprobs = call.top_logprobs;
        std::string bad = sampling.validate(info.vocab_size);
        if (!bad.empty()) return ApiError{400, bad, ""};
        for (auto& ids : prompts) {
            if (ids.empty()) return ApiError{400, "prompt is empty", "prompt"};
            for (int32_t t : ids)
                if (t < 0 || t >= info.vocab_size) return ApiError{400, "prompt token id " + std::to_string(t) + " is out of range", "prompt"};
            int64_t need = static_cast<int64_t>(ids.size()) + sampling.max_tokens;
            if (need > info.max_model_len)
                return ApiError{400, "this model's maximum context length is " + std::to_string(info.max_model_len) +
                                         " tokens; the prompt has " + std::to_string(ids.size()) + " tokens and max_tokens is " +
                                         std::to_string(sampling.max_tokens),
                                chat ? "messages" : "prompt"};
            GenerationRequest r;
            r.prompt_tokens = std::move(ids);
            r.sampling = sampling;
            call.requests.push_back(std::move(r));
        }
        return call;
    } catch (const BadField& b) {
        return ApiError{400, b.message, b.param};
    } catch (const Error& e) {
        return ApiError{400, e.what(), ""};
    }
}

}  // namespace deepinfer::server
