#pragma once
// The structured-output fields of a completion request, parsed into the engine's GrammarSpec:
// OpenAI `response_format` ({"type": "text" | "json_object" | "json_schema"}), vLLM's
// `guided_json`, `guided_regex`, `guided_grammar` (EBNF) and `guided_choice`, and `tool_choice`
// "required" or a named function (a grammar of the DSML tool-calls block). At most one of them
// per request. Malformed fields throw BadField; compile errors are checked by the caller.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/request.h"
#include "tokenizer/chat_encoding.h"

namespace deepinfer::server {

#define DI_STRUCTURED_FIELDS "response_format", "guided_json", "guided_regex", "guided_grammar", "guided_choice"

struct StructuredOutput {
    GrammarSpec grammar;
    std::string param;                         // the request field it came from (for errors)
    std::optional<std::string> prompt_schema;  // json_schema: shown to the model in the chat prompt
};

// `body_text` is the request as sent: schemas keep their key order (the model writes declared
// properties in it), which `body` (parsed with sorted keys) has lost.
StructuredOutput parse_structured_output(const nlohmann::json& body, std::string_view body_text);

struct ToolChoice {
    enum class Kind { kAuto, kNone, kRequired, kFunction } kind = Kind::kAuto;
    std::string function;  // kFunction
    bool forces_call() const { return kind == Kind::kRequired || kind == Kind::kFunction; }
};

// tool_choice: "auto" (default), "none", "required" or {"type": "function", "function": {"name"}};
// forcing a call needs tools, and a named one must be among them.
ToolChoice parse_tool_choice(const nlohmann::json& body, const std::vector<tokenizer::ChatTool>& tools);

}  // namespace deepinfer::server
