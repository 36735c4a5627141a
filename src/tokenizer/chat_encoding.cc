#include "tokenizer/chat_encoding.h"

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deepinfer::tokenizer {
namespace {

const std::string kBos = "<｜begin▁of▁sentence｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";
const std::string kUser = "<｜User｜>";
const std::string kAssistant = "<｜Assistant｜>";
const std::string kThinkStart = "<think>";
const std::string kThinkEnd = "</think>";
const std::string kDsml = "｜DSML｜";
const std::string kToolCallsStart = "\n\n<" + kDsml + "tool_calls>";

const char* kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, "
    "rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

std::string render_tools(const std::vector<ChatTool>& tools) {
    std::string schemas;
    for (size_t i = 0; i < tools.size(); ++i) schemas += (i ? "\n" : "") + tools[i].json;
    const std::string d = kDsml;
    return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
           "writing a \"<" + d + "tool_calls>\" block like the following:\n\n<" + d + "tool_calls>\n<" + d +
           "invoke name=\"$TOOL_NAME\">\n<" + d + "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">"
           "$PARAMETER_VALUE</" + d + "parameter>\n...\n</" + d + "invoke>\n<" + d + "invoke name=\"$TOOL_NAME2\">\n"
           "...\n</" + d + "invoke>\n</" + d + "tool_calls>\n\nString parameters should be specified as is and set "
           "`string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format "
           "and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by " + kThinkStart + "), you MUST "
           "output your complete reasoning inside " + kThinkStart + "..." + kThinkEnd + " BEFORE any tool calls or "
           "final response.\n\nOtherwise, output directly after " + kThinkEnd + " with tool calls or final response."
           "\n\n### Available Tool Schemas\n\n" + schemas + "\n\nYou MUST strictly follow the above defined tool name "
           "and parameter schemas to invoke tool calls.\n";
}

// One invoke block; arguments that are not a JSON object go in a single "arguments" parameter.
std::string render_tool_call(const ToolCall& tc) {
    nlohmann::json args;
    try {
        args = nlohmann::json::parse(tc.arguments);
    } catch (const nlohmann::json::exception&) {
        args = {{"arguments", tc.arguments}};
    }
    if (!args.is_object()) args = {{"arguments", tc.arguments}};
    std::string params;
    for (const auto& [k, v] : args.items()) {
        bool is_str = v.is_string();
        params += (params.empty() ? "" : "\n") + std::string("<") + kDsml + "parameter name=\"" + k + "\" string=\"" +
                  (is_str ? "true" : "false") + "\">" + (is_str ? v.get<std::string>() : v.dump()) + "</" + kDsml +
                  "parameter>";
    }
    return "<" + kDsml + "invoke name=\"" + tc.name + "\">\n" + params + "\n</" + kDsml + "invoke>";
}

// OpenAI tool messages become <tool_result> blocks of a user turn; consecutive user and tool
// messages form one turn, their blocks joined by blank lines.
struct Turn {
    std::string role;
    const ChatMessage* msg = nullptr;
    std::vector<std::string> blocks;  // user turns: text and tool-result blocks
};

std::vector<Turn> merge_tool_messages(const std::vector<ChatMessage>& messages) {
    std::vector<Turn> turns;
    for (const auto& m : messages) {
        if (m.role == "tool" || m.role == "user") {
            std::string block = m.role == "tool" ? "<tool_result>" + m.content + "</tool_result>" : m.content;
            if (!turns.empty() && turns.back().role == "user") {  // consecutive user / tool turns merge
                turns.back().blocks.push_back(block);
            } else {
                turns.push_back({"user", m.role == "user" ? &m : nullptr, {block}});
            }
            continue;
        }
        DI_CHECK(m.role == "system" || m.role == "developer" || m.role == "assistant", "unknown message role '{}'", m.role);
        turns.push_back({m.role, &m, {}});
    }
    return turns;
}

}  // namespace

std::string encode_chat(const std::vector<ChatMessage>& messages, const std::vector<ChatTool>& tools,
                        const ChatOptions& opt) {
    DI_CHECK(!messages.empty(), "messages must not be empty");
    std::vector<ChatMessage> msgs = messages;
    if (!tools.empty() && (msgs.front().role != "system")) msgs.insert(msgs.begin(), ChatMessage{"system"});
    std::vector<Turn> turns = merge_tool_messages(msgs);
    int last_user = -1;
    for (int i = 0; i < static_cast<int>(turns.size()); ++i)
        if (turns[i].role == "user" || turns[i].role == "developer") last_user = i;
    // Earlier turns' reasoning is dropped, unless tools are in play.
    bool drop_thinking = tools.empty();
    std::string out = opt.add_bos ? kBos : "";
    if (opt.thinking && opt.reasoning_effort == "max") out += kReasoningEffortMax;
    bool tools_rendered = false;
    for (int i = 0; i < static_cast<int>(turns.size()); ++i) {
        const Turn& t = turns[i];
        if (t.role == "system") {
            out += t.msg->content;
            if (!tools.empty() && !tools_rendered) out += "\n\n" + render_tools(tools), tools_rendered = true;
            if (opt.response_format)
                out += "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n" +
                       *opt.response_format;
        } else if (t.role == "developer") {
            if (drop_thinking && opt.thinking && i < last_user) continue;
            out += kUser + t.msg->content;
        } else if (t.role == "user") {
            out += kUser;
            for (size_t b = 0; b < t.blocks.size(); ++b) out += (b ? "\n\n" : "") + t.blocks[b];
        } else {  // assistant
            const ChatMessage& m = *t.msg;
            if (opt.thinking && (!drop_thinking || i > last_user)) out += m.reasoning_content + kThinkEnd;
            out += m.content;
            if (!m.tool_calls.empty()) {
                std::string calls;
                for (size_t c = 0; c < m.tool_calls.size(); ++c) calls += (c ? "\n" : "") + render_tool_call(m.tool_calls[c]);
                out += "\n\n<" + kDsml + "tool_calls>\n" + calls + "\n</" + kDsml + "tool_calls>";
            }
            out += kEos;
        }
        bool next_is_reply = i + 1 < static_cast<int>(turns.size()) && turns[i + 1].role == "assistant";
        if ((t.role == "user" || t.role == "developer") && (i + 1 == static_cast<int>(turns.size()) || next_is_reply))
            out += kAssistant + (opt.thinking && (!drop_thinking || i >= last_user) ? kThinkStart : kThinkEnd);
    }
    return out;
}

std::optional<std::string> tool_call_arguments(std::string_view invoke_body) {
    const std::string param = "<" + kDsml + "parameter name=\"", param_end = "</" + kDsml + "parameter>";
    std::string body(invoke_body);
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    size_t p = 0;
    while ((p = body.find(param, p)) != std::string::npos) {
        size_t key_end = body.find("\" string=\"", p);
        size_t val_start = key_end == std::string::npos ? key_end : body.find("\">", key_end);
        size_t val_end = val_start == std::string::npos ? val_start : body.find(param_end, val_start);
        if (val_end == std::string::npos) return std::nullopt;
        std::string key = body.substr(p + param.size(), key_end - p - param.size());
        bool is_str = body.compare(key_end + 10, 4, "true") == 0;
        std::string value = body.substr(val_start + 2, val_end - val_start - 2);
        try {
            args[key] = is_str ? nlohmann::ordered_json(value) : nlohmann::ordered_json::parse(value);
        } catch (const nlohmann::json::exception&) {
            args[key] = value;
        }
        p = val_end + param_end.size();
    }
    return args.dump();
}

const std::string& tool_calls_opener() { return kToolCallsStart; }

namespace {

// Parses the <｜DSML｜invoke ...> blocks after the tool_calls opener; nullopt when malformed.
std::optional<std::vector<ToolCall>> parse_tool_calls(const std::string& body) {
    std::vector<ToolCall> calls;
    const std::string invoke = "<" + kDsml + "invoke name=\"", invoke_end = "</" + kDsml + "invoke>";
    size_t pos = 0;
    while ((pos = body.find(invoke, pos)) != std::string::npos) {
        size_t name_end = body.find("\">", pos + invoke.size());
        size_t block_end = body.find(invoke_end, pos);
        if (name_end == std::string::npos || block_end == std::string::npos) return std::nullopt;
        ToolCall tc;
        tc.name = body.substr(pos + invoke.size(), name_end - pos - invoke.size());
        auto args = tool_call_arguments(std::string_view(body).substr(name_end, block_end - name_end));
        if (!args) return std::nullopt;
        tc.arguments = std::move(*args);
        calls.push_back(std::move(tc));
        pos = block_end + invoke_end.size();
    }
    return calls;
}

}  // namespace

ParsedCompletion parse_completion(const std::string& text, bool thinking) {
    ParsedCompletion out;
    std::string rest = text;
    if (thinking) {
        size_t end = rest.find(kThinkEnd);
        if (end == std::string::npos) {  // still thinking (cut off by max_tokens)
            out.reasoning_content = rest;
            return out;
        }
        out.reasoning_content = rest.substr(0, end);
        rest = rest.substr(end + kThinkEnd.size());
    }
    size_t calls = rest.find(kToolCallsStart);
    if (calls != std::string::npos) {
        auto parsed = parse_tool_calls(rest.substr(calls));
        if (parsed && !parsed->empty()) {
            out.tool_calls = std::move(*parsed);
            rest = rest.substr(0, calls);
        }
    }
    out.content = rest;
    return out;
}

ReasoningStream::Delta ReasoningStream::push(const std::string& piece) {
    Delta d;
    if (!in_reasoning_) {
        d.content = piece;
        return d;
    }
    held_ += piece;
    size_t end = held_.find(kThinkEnd);
    if (end != std::string::npos) {
        d.reasoning = held_.substr(0, end);
        d.content = held_.substr(end + kThinkEnd.size());
        held_.clear();
        in_reasoning_ = false;
        return d;
    }
    // Keep back a tail that could still become "</think>".
    size_t keep = 0;
    for (size_t k = std::min(held_.size(), kThinkEnd.size() - 1); k > 0; --k)
        if (held_.compare(held_.size() - k, k, kThinkEnd, 0, k) == 0) {
            keep = k;
            break;
        }
    d.reasoning = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return d;
}

ReasoningStream::Delta ReasoningStream::flush() {
    Delta d;
    (in_reasoning_ ? d.reasoning : d.content) = held_;
    held_.clear();
    return d;
}

}  // namespace deepinfer::tokenizer
