#pragma once
// Which rules of a grammar reference which, and which of them are recursive (part of a cycle).
// Recursive rules keep their own DFA and are entered through calls; the others are expanded in
// place.
#include <cstdint>
#include <vector>

#include "grammar/grammar_ir.h"

namespace deepinfer::grammar {

struct RuleGraph {
    std::vector<std::vector<int32_t>> references;  // per rule, the rules its body refers to
    std::vector<uint8_t> recursive;                // per rule: on a cycle of references
};

RuleGraph analyze_rules(const Grammar& grammar);

}  // namespace deepinfer::grammar
