#include "grammar/raw_text.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/encoding.h"
#include "grammar/grammar_error.h"
#include "grammar/pda.h"
#include "grammar/regex.h"

namespace deepinfer::grammar {
namespace {

using Json = nlohmann::ordered_json;

const std::set<std::string, std::less<>> kAnnotations = {"title", "description", "default", "examples", "$comment", "deprecated",
                                                         "readOnly", "writeOnly", "$schema", "$id", "contentMediaType"};

Json parse_schema(std::string_view text) {
    Json schema = Json::parse(text, nullptr, false);
    if (schema.is_discarded() || !schema.is_object()) grammar_fail("the raw text schema must be a JSON object");
    for (const auto& [key, value] : schema.items()) {
        if (key == "type") {
            bool string_allowed = value == "string" || (value.is_array() && std::find(value.begin(), value.end(), "string") != value.end());
            if (!string_allowed) grammar_fail("a raw text schema must allow type \"string\"");
        } else if (key == "minLength" || key == "maxLength") {
            if (!value.is_number_unsigned() || value.get<uint64_t>() > Dfa::kMaxStates) grammar_fail("bad {} in a raw text schema", key);
        } else if (key == "pattern") {
            if (!value.is_string()) grammar_fail("pattern must be a string");
        } else if (key == "enum" || key == "const") {
            for (const Json& v : key == "enum" ? value : Json::array({value}))
                if (!v.is_string()) grammar_fail("raw text {} values must be strings", key);
        } else if (!kAnnotations.contains(key)) {
            grammar_fail("unsupported keyword '{}' in a raw text schema", key);
        }
    }
    return schema;
}

ExprId any_char(Grammar& g) { return utf8_class(g, scalar_values()); }

// The texts v for which the terminator occurs in v + terminator before v's end: a DFA of
// "anything, the terminator, at least one more character", whose accepting states are moved back
// by the terminator (a state accepts when reading the terminator from it reaches acceptance).
Dfa cut_short(Grammar& g, std::string_view terminator) {
    Dfa d = regular_dfa(g, g.seq({g.star(any_char(g)), g.literal(terminator), g.plus(any_char(g))}));
    std::vector<uint8_t> accepting(d.accepting.size(), 0);
    for (int32_t q = 0; q < d.num_states(); ++q) {
        int32_t s = q;
        for (char c : terminator)
            if (s != Dfa::kDead) s = d.step(s, static_cast<uint8_t>(c));
        accepting[q] = s != Dfa::kDead && d.accepting[s];
    }
    d.accepting = std::move(accepting);
    return d;
}

}  // namespace

ExprId add_raw_text(Grammar& g, std::string_view schema_text, std::string_view terminator) {
    if (terminator.empty()) grammar_fail("raw text needs a terminator");
    Json schema = parse_schema(schema_text);
    int64_t min = schema.value("minLength", int64_t{0}), max = schema.contains("maxLength") ? schema["maxLength"].get<int64_t>() : -1;
    Dfa text = min > 0 || max >= 0 ? dfa_repeat(regular_dfa(g, any_char(g)), static_cast<int32_t>(min), static_cast<int32_t>(max))
                                   : regular_dfa(g, g.star(any_char(g)));
    if (schema.contains("pattern")) {
        Dfa pattern = regular_dfa(g, lower_regex(g, parse_regex(schema["pattern"].get<std::string>()), CharEncoding::kUtf8, RegexMatch::kSearch));
        text = dfa_product(text, pattern, DfaProduct::kIntersection);
    }
    for (const char* key : {"enum", "const"}) {
        if (!schema.contains(key)) continue;
        std::vector<ExprId> values;
        for (const Json& v : key == std::string("enum") ? schema[key] : Json::array({schema[key]})) values.push_back(g.literal(v.get<std::string>()));
        text = dfa_product(text, regular_dfa(g, g.alt(values)), DfaProduct::kIntersection);
    }
    text = dfa_product(text, cut_short(g, terminator), DfaProduct::kDifference);
    if (text.language_is_empty()) return g.nothing();
    return g.seq({g.automaton(std::move(text)), g.literal(terminator)});
}

}  // namespace deepinfer::grammar
