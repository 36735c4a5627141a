#pragma once
// The EBNF grammar syntax (docs/grammar.md): GBNF-style rules `name ::= alternatives`, string
// literals, character classes, groups, quantifiers, /regex/ terminals and %json{...} embedded JSON
// Schemas. Syntax errors name line:col.
#include <string>
#include <string_view>

#include "grammar/grammar_ir.h"
#include "grammar/json_schema_options.h"

namespace deepinfer::grammar {

class FormatCache;

Grammar parse_ebnf(std::string_view text, const std::string& root_rule, const JsonSchemaOptions& json_options,
                   FormatCache* formats = nullptr);

}  // namespace deepinfer::grammar
