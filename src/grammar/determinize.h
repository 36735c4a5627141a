#pragma once
// Subset construction: turns the NFA of one rule into a DFA over byte classes, keeping rule calls
// as labelled edges (a call is a symbol of the alphabet here; the pushdown part happens at run time).
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "grammar/byte_set.h"
#include "grammar/nfa.h"

namespace deepinfer::grammar {

// The coarsest partition of byte values that no byte set of the NFA splits.
struct ByteClasses {
    std::array<uint8_t, 256> of_byte{};
    int32_t count = 0;
    std::vector<std::vector<uint8_t>> of_set;  // per byte set: the classes it contains

    static ByteClasses partition(std::span<const ByteSet> sets);
};

struct RuleCall {
    int32_t rule;
    int32_t target;  // DFA state to continue from once the called rule has matched
};

struct RuleDfa {
    int32_t num_states = 0;
    std::vector<int32_t> next;  // [num_states * classes.count], -1 where no edge
    std::vector<uint8_t> accepting;
    std::vector<std::vector<RuleCall>> calls;  // per state
};

// DFA of the NFA fragment that starts at `start` and ends at `accept`. Fails with a GrammarError
// past max_states.
RuleDfa determinize(const Nfa& nfa, const ByteClasses& classes, int32_t start, int32_t accept, int32_t max_states);

// A call-free DFA for a regular fragment (used for intersections and differences).
Dfa to_dfa(const RuleDfa& rule, const ByteClasses& classes);

}  // namespace deepinfer::grammar
