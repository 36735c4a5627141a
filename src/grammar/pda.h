#pragma once
// The compiled form of a grammar: one DFA per called rule, all numbered in one state space, with
// call edges between them. Running it needs a stack of return states (see stack_set.h). Rules that
// are not recursive are expanded in place, so a grammar without recursion is a single DFA.
// State 0 is the dead state. Every live state can still reach the end of its rule (trimmed), so a
// prefix that survives can always be completed.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "grammar/dfa.h"
#include "grammar/grammar_ir.h"

namespace deepinfer::grammar {

struct CallEdge {
    int32_t callee_start;   // first state of the called rule
    int32_t return_state;   // where the caller continues once the callee has matched
};

struct PdaLimits {
    int32_t max_nfa_states = 1 << 20;
    int32_t max_rule_states = 1 << 18;
    int32_t max_total_states = 1 << 18;  // all rules together
};

class Pda {
public:
    static constexpr int32_t kDead = 0;

    int32_t num_states() const { return static_cast<int32_t>(accepting_.size()); }
    int32_t num_classes() const { return num_classes_; }
    int32_t start() const { return start_; }
    int32_t step(int32_t state, uint8_t b) const { return next_[size_t(state) * num_classes_ + byte_class_[b]]; }
    const int32_t* row(int32_t state) const { return next_.data() + size_t(state) * num_classes_; }
    const std::array<uint8_t, 256>& byte_class() const { return byte_class_; }
    // The rule may end in this state (for the root rule: the output may end).
    bool accepting(int32_t state) const { return accepting_[state]; }
    std::span<const CallEdge> calls(int32_t state) const {
        return {calls_.data() + call_begin_[state], size_t(call_begin_[state + 1] - call_begin_[state])};
    }
    bool has_calls(int32_t state) const { return call_begin_[state + 1] != call_begin_[state]; }
    int32_t rule_of(int32_t state) const { return rule_of_[state]; }
    const std::string& rule_name(int32_t rule) const { return rule_names_[rule]; }
    int32_t num_called_rules() const { return static_cast<int32_t>(called_rules_.size()); }

private:
    friend class PdaAssembler;
    std::array<uint8_t, 256> byte_class_{};
    int32_t num_classes_ = 1;
    std::vector<int32_t> next_;
    std::vector<uint8_t> accepting_;
    std::vector<int32_t> call_begin_;
    std::vector<CallEdge> calls_;
    std::vector<int32_t> rule_of_;
    std::vector<std::string> rule_names_;  // per grammar rule
    std::vector<int32_t> called_rules_;    // rules that kept their own DFA
    int32_t start_ = 0;
};

// Compiles the grammar from its root rule. Throws GrammarError (left recursion, undefined rules,
// size limits).
Pda build_pda(const Grammar& grammar, const PdaLimits& limits = {});

// The DFA of one regular expression of the grammar (rules it uses are expanded; recursion is an
// error).
Dfa regular_dfa(const Grammar& grammar, ExprId expr, const PdaLimits& limits = {});

}  // namespace deepinfer::grammar
