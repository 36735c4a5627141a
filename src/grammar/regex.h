#pragma once
// Regular expressions in the JSON Schema `pattern` dialect (ECMA-262 syntax, matched per code
// point): alternation, groups (capturing, non-capturing, named), classes with ranges and negation,
// the Perl classes \d \w \s and their negations, `.`, quantifiers * + ? {n} {n,} {n,m} (lazy forms
// allowed: they match the same strings), escapes \t \n \r \f \v \0 \cX \xHH \uHHHH \u{H...}.
// Anchors ^ and $ are accepted at the start and end of top-level alternatives. Backreferences,
// lookaround, word boundaries and \p{...} are errors ("bad regex at offset N: ...").
#include <cstdint>
#include <string_view>
#include <vector>

#include "grammar/codepoint_set.h"
#include "grammar/encoding.h"
#include "grammar/grammar_ir.h"

namespace deepinfer::grammar {

struct RegexNode {
    enum class Kind { kSet, kSeq, kAlt, kRepeat } kind;
    CodepointSet set;            // kSet
    std::vector<int32_t> items;  // kSeq / kAlt children, kRepeat: one child
    int32_t min = 0, max = 0;    // kRepeat, max = Grammar::kUnbounded for none
};

struct RegexBranch {
    int32_t node;
    bool anchored_start, anchored_end;
};

struct Regex {
    std::vector<RegexNode> nodes;
    std::vector<RegexBranch> branches;  // top-level alternatives
};

Regex parse_regex(std::string_view pattern);

enum class RegexMatch {
    kWhole,   // the text must match entirely (regex grammars, EBNF /.../ terminals)
    kSearch,  // JSON Schema semantics: the pattern may match anywhere unless anchored
};

ExprId lower_regex(Grammar& g, const Regex& regex, CharEncoding encoding, RegexMatch match);

// The classes behind \d, \w, \s (ECMA-262 definitions).
CodepointSet digit_class();
CodepointSet word_class();
CodepointSet space_class();

}  // namespace deepinfer::grammar
