#pragma once
// Raw text of a JSON Schema string, ended by a terminator: the value as it is, without quotes or
// escapes (DeepSeek's DSML tool calls write string parameters this way, up to
// </｜DSML｜parameter>, and reasoning up to </think>). The text is valid UTF-8, satisfies the
// schema's string constraints and is never cut short by the terminator: the first occurrence of
// the terminator in text + terminator is the one that ends it.
#include <string_view>

#include "grammar/grammar_ir.h"

namespace deepinfer::grammar {

// The text and then the terminator. Schema keywords: `type` (must allow "string"), `minLength`,
// `maxLength`, `pattern`, `enum` / `const` (strings), annotations; others are a GrammarError
// naming the keyword.
ExprId add_raw_text(Grammar& g, std::string_view schema_text, std::string_view terminator);

}  // namespace deepinfer::grammar
