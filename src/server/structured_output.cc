#include "server/structured_output.h"

#include <fmt/format.h>

#include "server/request_fields.h"

namespace deepinfer::server {
namespace {

using nlohmann::json;

using OrderedJson = nlohmann::ordered_json;

// A JSON Schema given as an object (or, as vLLM allows for guided_json, as JSON text), in the
// key order it was sent in.
std::string schema_text(const OrderedJson& value, const std::string& param) {
    if (value.is_object() || value.is_boolean()) return value.dump();
    if (value.is_string()) {
        OrderedJson parsed = OrderedJson::parse(value.get<std::string>(), nullptr, false);
        if (!parsed.is_discarded() && (parsed.is_object() || parsed.is_boolean())) return parsed.dump();
    }
    throw BadField{param, param + " must be a JSON Schema (an object)"};
}

// The value at `path` of the request as sent (null when absent).
OrderedJson ordered_field(const OrderedJson& body, std::initializer_list<const char*> path) {
    const OrderedJson* at = &body;
    for (const char* key : path) {
        if (!at->is_object() || !at->contains(key)) return nullptr;
        at = &(*at)[key];
    }
    return *at;
}

StructuredOutput response_format(const json& f, const OrderedJson& body) {
    const std::string p = "response_format";
    if (!f.is_object()) throw BadField{p, "response_format must be an object"};
    std::string type = get_field<std::string>(f, "type", "a string", p + ".").value_or("");
    StructuredOutput out;
    out.param = p;
    if (type == "text") {
        reject_unknown_fields(f, {"type"}, p + ".");
    } else if (type == "json_object") {
        reject_unknown_fields(f, {"type"}, p + ".");
        out.grammar = {GrammarSpec::Kind::kJsonSchema, R"({"type": "object"})"};
    } else if (type == "json_schema") {
        reject_unknown_fields(f, {"type", "json_schema"}, p + ".");
        auto js = f.find("json_schema");
        if (js == f.end() || !js->is_object()) throw BadField{p, "response_format.json_schema must be an object"};
        std::string at = p + ".json_schema.";
        reject_unknown_fields(*js, {"name", "description", "schema", "strict"}, at);
        required_string(*js, "name", at);
        (void)get_field<std::string>(*js, "description", "a string", at);
        (void)get_field<bool>(*js, "strict", "a boolean", at);  // enforced exactly either way
        if (!js->contains("schema")) throw BadField{p, at + "schema is required"};
        out.grammar = {GrammarSpec::Kind::kJsonSchema, schema_text(ordered_field(body, {"response_format", "json_schema", "schema"}), at + "schema")};
        out.prompt_schema = out.grammar.text;
    } else {
        throw BadField{p, "response_format.type must be \"text\", \"json_object\" or \"json_schema\""};
    }
    return out;
}

// guided_choice: the output is exactly one of the strings.
std::string choice_grammar(const json& choices) {
    if (!choices.is_array() || choices.empty()) throw BadField{"guided_choice", "guided_choice must be a non-empty array of strings"};
    std::string rule = "root ::=";
    for (size_t i = 0; i < choices.size(); ++i) {
        if (!choices[i].is_string()) throw BadField{"guided_choice", "guided_choice must be a non-empty array of strings"};
        rule += i ? " | \"" : " \"";
        for (unsigned char c : choices[i].get<std::string>()) {
            if (c == '"' || c == '\\') rule += '\\', rule += static_cast<char>(c);
            else if (c < 0x20) rule += fmt::format("\\x{:02X}", c);
            else rule += static_cast<char>(c);
        }
        rule += '"';
    }
    return rule;
}

}  // namespace

StructuredOutput parse_structured_output(const json& j, std::string_view body_text) {
    std::vector<StructuredOutput> given;
    OrderedJson body = j.contains("response_format") || j.contains("guided_json") ? OrderedJson::parse(body_text, nullptr, false) : OrderedJson();
    if (auto it = j.find("response_format"); it != j.end() && !it->is_null()) {
        StructuredOutput f = response_format(*it, body);
        if (f.grammar.active()) given.push_back(std::move(f));
    }
    if (auto it = j.find("guided_json"); it != j.end() && !it->is_null())
        given.push_back({{GrammarSpec::Kind::kJsonSchema, schema_text(ordered_field(body, {"guided_json"}), "guided_json")}, "guided_json"});
    if (auto v = get_field<std::string>(j, "guided_regex", "a string")) given.push_back({{GrammarSpec::Kind::kRegex, *v}, "guided_regex"});
    if (auto v = get_field<std::string>(j, "guided_grammar", "a string (an EBNF grammar)"))
        given.push_back({{GrammarSpec::Kind::kEbnf, *v}, "guided_grammar"});
    if (auto it = j.find("guided_choice"); it != j.end() && !it->is_null())
        given.push_back({{GrammarSpec::Kind::kEbnf, choice_grammar(*it)}, "guided_choice"});
    if (given.size() > 1)
        throw BadField{given[1].param, "only one of response_format (json), guided_json, guided_regex, guided_grammar and "
                                       "guided_choice may be given"};
    return given.empty() ? StructuredOutput{} : std::move(given[0]);
}

ToolChoice parse_tool_choice(const json& j, const std::vector<tokenizer::ChatTool>& tools) {
    auto it = j.find("tool_choice");
    ToolChoice choice;
    if (it == j.end() || it->is_null() || *it == "auto") return choice;
    if (*it == "none") choice.kind = ToolChoice::Kind::kNone;
    else if (*it == "required") choice.kind = ToolChoice::Kind::kRequired;
    else if (it->is_object()) {
        reject_unknown_fields(*it, {"type", "function"}, "tool_choice.");
        auto f = it->find("function");
        if (it->value("type", json()) != "function" || f == it->end() || !f->is_object())
            throw BadField{"tool_choice", "tool_choice must be {\"type\": \"function\", \"function\": {\"name\": ...}}"};
        reject_unknown_fields(*f, {"name"}, "tool_choice.function.");
        choice.kind = ToolChoice::Kind::kFunction;
        choice.function = required_string(*f, "name", "tool_choice.function.");
    } else {
        throw BadField{"tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or a named function"};
    }
    if (choice.forces_call() && tools.empty()) throw BadField{"tool_choice", "tool_choice forces a tool call but no tools are given"};
    if (choice.kind == ToolChoice::Kind::kFunction) {
        bool known = false;
        for (const auto& t : tools) known = known || json::parse(t.json).value("name", "") == choice.function;
        if (!known) throw BadField{"tool_choice", "tool_choice names function '" + choice.function + "', which is not among the tools"};
    }
    return choice;
}

}  // namespace deepinfer::server
