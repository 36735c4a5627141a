#include "tokenizer/tool_call_grammar.h"

#include <set>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deepinfer::tokenizer {
namespace {

using Json = nlohmann::ordered_json;

const std::string kDsml = "｜DSML｜";
const std::set<std::string> kObjectKeywords = {"type", "properties", "required", "additionalProperties", "$defs", "definitions",
                                               "title", "description", "$schema", "$comment"};

// An EBNF string literal of `text`.
std::string literal(const std::string& text) {
    std::string out = "\"";
    for (unsigned char c : text) {
        if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
        else if (c == '\n') out += "\\n";
        else if (c < 0x20) out += fmt::format("\\x{:02X}", c);
        else out += static_cast<char>(c);
    }
    return out + "\"";
}

// A property's schema with the parameters' definitions beside it, so its $refs still resolve.
Json property_schema(const Json& property, const Json& parameters) {
    Json schema = property.is_object() ? property : Json::object();
    for (const char* defs : {"$defs", "definitions"})
        if (parameters.contains(defs) && !schema.contains(defs)) schema[defs] = parameters[defs];
    return schema;
}

// One parameter element: "\n<｜DSML｜parameter name="k" string="...">" value "</｜DSML｜parameter>".
std::string parameter(const std::string& name, const Json& schema, const Json& parameters) {
    std::string head = "\n<" + kDsml + "parameter name=\"" + name + "\" string=\"";
    std::string end = "</" + kDsml + "parameter>";
    if (schema.is_object() && schema.value("type", Json()) == "string")
        return literal(head + "true\">") + " %text" + schema.dump() + " until " + literal(end);
    return literal(head + "false\">") + " %json" + property_schema(schema, parameters).dump() + " " + literal(end);
}

// The rule of one tool's invoke block.
std::string invoke_rule(const std::string& rule, const Json& function) {
    std::string name = function.value("name", "");
    Json parameters = function.value("parameters", Json::object());
    for (const auto& [key, value] : parameters.items())
        DI_CHECK(kObjectKeywords.contains(key), "tool '{}': parameters keyword '{}' cannot be enforced in a forced tool call", name, key);
    DI_CHECK(parameters.value("type", Json("object")) == "object", "tool '{}': parameters must be an object schema", name);
    std::set<std::string> required;
    for (const Json& r : parameters.value("required", Json::array())) required.insert(r.get<std::string>());
    std::string body = literal("<" + kDsml + "invoke name=\"" + name + "\">");
    const Json properties = parameters.value("properties", Json::object());
    for (const auto& [key, value] : properties.items()) {
        std::string element = parameter(key, value, parameters);
        body += required.contains(key) ? " " + element : " (" + element + ")?";
    }
    for (const std::string& r : required)
        DI_CHECK(properties.contains(r), "tool '{}': required parameter '{}' has no schema in properties", name, r);
    if (properties.empty()) body += " " + literal("\n");
    return rule + " ::= " + body + " " + literal("\n</" + kDsml + "invoke>") + "\n";
}

}  // namespace

std::string tool_call_grammar(const std::vector<ChatTool>& tools, const ToolCallGrammarOptions& options) {
    std::string rules, invokes;
    int num_calls = 0;
    for (const ChatTool& tool : tools) {
        Json function = Json::parse(tool.json);
        if (!options.only_function.empty() && function.value("name", "") != options.only_function) continue;
        std::string rule = "call" + std::to_string(num_calls++);
        rules += invoke_rule(rule, function);
        invokes += (invokes.empty() ? "" : " | ") + rule;
    }
    DI_CHECK(!invokes.empty(), "no tool named '{}'", options.only_function);
    std::string block = literal(tool_calls_opener() + "\n") + " invoke" +
                        (options.parallel ? " (" + literal("\n") + " invoke)*" : std::string()) + " " +
                        literal("\n</" + kDsml + "tool_calls>");
    std::string root = options.thinking ? "root ::= %text{\"type\": \"string\"} until \"</think>\" " + block : "root ::= " + block;
    return root + "\ninvoke ::= " + invokes + "\n" + rules;
}

}  // namespace deepinfer::tokenizer
