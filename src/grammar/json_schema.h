#pragma once
// JSON Schema (draft 2020-12) to grammar. docs/grammar.md lists the supported keywords; any other
// validation keyword is a compile error naming it.
#include <string>
#include <string_view>

#include "grammar/grammar_ir.h"
#include "grammar/json_schema_options.h"

namespace deepinfer::grammar {

class FormatCache;

// Adds rules for the JSON values `schema_text` accepts; returns the expression of one such value.
// Rule names get `rule_prefix` so several schemas can live in one grammar. `formats` (optional)
// shares compiled format automata between compiles.
ExprId add_json_schema(Grammar& g, std::string_view schema_text, const JsonSchemaOptions& options,
                       const std::string& rule_prefix, FormatCache* formats = nullptr);

}  // namespace deepinfer::grammar
