#pragma once
// Lowering code point classes to bytes: raw UTF-8, or JSON string content where a character may
// also be written as an escape (\n, \", \u00e9, a surrogate pair \ud83d\ude00). The JSON form
// lets a pattern or an enum constrain the decoded string whatever escapes the model chooses.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/codepoint_set.h"
#include "grammar/grammar_ir.h"

namespace deepinfer::grammar {

enum class CharEncoding {
    kUtf8,         // raw UTF-8
    kJsonString,   // JSON string content: a character raw or as any escape
    kJsonMinimal,  // JSON string content with escapes only where JSON requires them
};

// Unicode scalar values: every code point except the surrogates.
CodepointSet scalar_values();

// Splits [lo, hi] into runs whose digits (most significant first, `width` digits in `base`) each
// cover a contiguous range: the building block of numeric and hex range patterns.
std::vector<std::vector<std::pair<uint32_t, uint32_t>>> digit_range_runs(uint32_t lo, uint32_t hi, uint32_t base, int width);

// One character of `set` (surrogates never match).
ExprId encode_class(Grammar& g, const CodepointSet& set, CharEncoding encoding);
ExprId utf8_class(Grammar& g, const CodepointSet& set);
// Any encoding of exactly the string `text` (UTF-8 input).
ExprId encode_string(Grammar& g, std::string_view text, CharEncoding encoding);

void append_utf8(std::string& out, uint32_t codepoint);
// The canonical JSON string content of `text`: escapes only where JSON requires them (\" \\ and
// control characters, short forms where they exist, else \u00xx).
std::string json_canonical_content(std::string_view text);
// Value of one hexadecimal digit, -1 for another character.
int hex_digit_value(char c);
// Reads `count` hexadecimal digits at text[pos]; false (pos unchanged) if they are not there.
bool read_hex(std::string_view text, size_t& pos, int count, uint32_t& value);
// Decodes one character at text[pos]; returns false on invalid UTF-8.
bool decode_utf8(std::string_view text, size_t& pos, uint32_t& codepoint);

}  // namespace deepinfer::grammar
