#pragma once
// The EBNF grammar (docs/grammar.md) of a DeepSeek DSML tool-calls block, for forcing a tool call
// (OpenAI tool_choice "required" or a named function): the block exactly as render_tool_call
// writes it, each call's parameters those of its tool's schema in the schema's order (required ones
// always, optional ones maybe). String parameters (`"type": "string"`) are raw text up to
// </｜DSML｜parameter> with string="true" (%text), the others compact JSON values with
// string="false" (%json), so parse_tool_calls reads arguments that satisfy the tool's schema.
#include <string>
#include <vector>

#include "tokenizer/chat_encoding.h"

namespace deepinfer::tokenizer {

struct ToolCallGrammarOptions {
    std::string only_function;  // a named function; empty = any of the tools
    bool thinking = false;      // reasoning (any text without </think>) and </think> come first
    bool parallel = true;       // one or more calls; false = exactly one
};

// Throws deepinfer::Error naming the tool and the keyword a schema uses that the grammar cannot
// enforce (parameters must be an object schema of `properties` and `required`).
std::string tool_call_grammar(const std::vector<ChatTool>& tools, const ToolCallGrammarOptions& options);

}  // namespace deepinfer::tokenizer
