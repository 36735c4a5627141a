// Chat request parts: messages (text content parts, assistant tool calls, tool results) and the
// tools array, every field type-checked.
#include "server/openai_protocol.h"
#include "server/request_fields.h"

namespace deepinfer::server {
namespace {

using nlohmann::json;

std::string index_path(const char* array, size_t i) { return std::string(array) + "[" + std::to_string(i) + "]."; }

tokenizer::ToolCall tool_call_from(const json& tc, const std::string& where) {
    if (!tc.is_object()) throw BadField{"messages", where + " must be an object"};
    reject_unknown_fields(tc, {"id", "type", "function", "index"}, where);
    auto type = get_field<std::string>(tc, "type", "a string", where);
    if (type && *type != "function") throw BadField{"messages", where + "type must be \"function\""};
    if (!tc.contains("function") || !tc["function"].is_object())
        throw BadField{"messages", where + "function must be an object"};
    const json& f = tc["function"];
    tokenizer::ToolCall out;
    out.id = get_field<std::string>(tc, "id", "a string", where).value_or("");
    out.name = required_string(f, "name", where + "function.");
    auto args = f.find("arguments");
    if (args != f.end() && !args->is_null()) {
        if (args->is_string()) out.arguments = args->get<std::string>();
        else if (args->is_object()) out.arguments = args->dump();
        else throw BadField{"messages", where + "function.arguments must be a JSON string or an object"};
    }
    return out;
}

std::string message_text(const json& content, const std::string& where) {
    if (content.is_null()) return {};
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) throw BadField{"messages", where + "content must be a string or an array of parts"};
    std::string text;
    for (size_t i = 0; i < content.size(); ++i) {
        const json& part = content[i];
        std::string at = where + index_path("content", i);
        if (!part.is_object()) throw BadField{"messages", at + " must be an object"};
        std::string type = required_string(part, "type", at);
        if (type == "image_url" || type == "input_image" || type == "image")
            throw BadField{"messages", "image inputs are not supported: this build has no vision tower (text only)"};
        if (type != "text") throw BadField{"messages", "only text content parts are supported (" + at + "type is '" + type + "')"};
        text += required_string(part, "text", at);
    }
    return text;
}

}  // namespace

std::vector<tokenizer::ChatMessage> parse_messages(const json& messages) {
    if (!messages.is_array() || messages.empty()) throw BadField{"messages", "messages must be a non-empty array"};
    std::vector<tokenizer::ChatMessage> out;
    for (size_t i = 0; i < messages.size(); ++i) {
        const json& m = messages[i];
        std::string at = index_path("messages", i);
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
            throw BadField{"messages", "each message needs a string role"};
        reject_unknown_fields(m, {"role", "content", "name", "reasoning_content", "tool_calls", "tool_call_id", "refusal"}, at);
        tokenizer::ChatMessage msg;
        msg.role = m["role"].get<std::string>();
        if (msg.role != "system" && msg.role != "developer" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
            throw BadField{"messages", "unknown message role '" + msg.role + "'"};
        msg.content = message_text(m.value("content", json()), at);
        (void)get_field<std::string>(m, "name", "a string", at);  // DeepSeek's chat format has no speaker names
        msg.reasoning_content = get_field<std::string>(m, "reasoning_content", "a string", at).value_or("");
        msg.tool_call_id = get_field<std::string>(m, "tool_call_id", "a string", at).value_or("");
        if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
            if (!calls->is_array()) throw BadField{"messages", at + "tool_calls must be an array"};
            for (size_t c = 0; c < calls->size(); ++c) msg.tool_calls.push_back(tool_call_from((*calls)[c], at + index_path("tool_calls", c)));
        }
        out.push_back(std::move(msg));
    }
    return out;
}

std::vector<tokenizer::ChatTool> parse_tools(const json& body) {
    std::vector<tokenizer::ChatTool> tools;
    auto it = body.find("tools");
    if (it == body.end() || it->is_null()) return tools;
    if (!it->is_array()) throw BadField{"tools", "tools must be an array"};
    for (size_t i = 0; i < it->size(); ++i) {
        const json& t = (*it)[i];
        std::string at = index_path("tools", i);
        if (!t.is_object()) throw BadField{"tools", at + " must be an object"};
        reject_unknown_fields(t, {"type", "function"}, at);
        if (get_field<std::string>(t, "type", "a string", at).value_or("function") != "function")
            throw BadField{"tools", at + "type must be \"function\""};
        if (!t.contains("function") || !t["function"].is_object()) throw BadField{"tools", at + "function must be an object"};
        const json& f = t["function"];
        std::string fat = at + "function.";
        reject_unknown_fields(f, {"name", "description", "parameters", "strict"}, fat);
        required_string(f, "name", fat);
        (void)get_field<std::string>(f, "description", "a string", fat);
        (void)get_field<bool>(f, "strict", "a boolean", fat);
        if (f.contains("parameters") && !f["parameters"].is_object() && !f["parameters"].is_null())
            throw BadField{"tools", fat + "parameters must be a JSON Schema object"};
        tools.push_back({f.dump()});
    }
    return tools;
}

}  // namespace deepinfer::server
