#pragma once
// Thompson-style NFA over byte sets, epsilon edges and rule calls, built from grammar expressions
// in continuation-passing style: build(e, c) returns a state from which e is matched and then c
// continues. Memoizing on (e, c) lets shared sub-expressions with the same continuation share
// states, so a DAG-shaped grammar stays linear in size.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/byte_set.h"
#include "grammar/grammar_ir.h"

namespace deepinfer::grammar {

struct NfaEdge {
    int32_t label;  // >= 0: byte set index; kEpsilon; <= kCallBase: a call of rule (kCallBase - label)
    int32_t target;
};

class Nfa {
public:
    static constexpr int32_t kEpsilon = -1;
    static constexpr int32_t kCallBase = -2;
    static int32_t call_label(int32_t rule) { return kCallBase - rule; }
    static int32_t called_rule(int32_t label) { return kCallBase - label; }

    explicit Nfa(std::vector<ByteSet> byte_sets);

    int32_t add_state() { return num_states_++; }
    void add_edge(int32_t from, int32_t label, int32_t to) { pending_.push_back({from, {label, to}}); }
    int32_t intern(const ByteSet& set);
    // Groups the edges by source state; call before edges().
    void finish();

    int32_t num_states() const { return num_states_; }
    std::span<const NfaEdge> edges(int32_t state) const {
        return {edges_.data() + offsets_[state], size_t(offsets_[state + 1] - offsets_[state])};
    }
    const std::vector<ByteSet>& byte_sets() const { return byte_sets_; }

private:
    std::vector<ByteSet> byte_sets_;
    std::unordered_map<size_t, std::vector<int32_t>> interned_;
    int32_t num_states_ = 0;
    std::vector<std::pair<int32_t, NfaEdge>> pending_;
    std::vector<int32_t> offsets_;
    std::vector<NfaEdge> edges_;
};

class NfaBuilder {
public:
    // inline_rule[r] says whether references to rule r are expanded in place (otherwise they
    // become call edges). max_states bounds the size of what is built.
    NfaBuilder(const Grammar& grammar, const std::vector<uint8_t>& inline_rule, Nfa& nfa, int32_t max_states);

    int32_t build(ExprId expr, int32_t continuation);
    const std::vector<int32_t>& called_rules() const { return called_; }

private:
    int32_t build_uncached(ExprId expr, int32_t continuation);
    int32_t build_repeat(const ExprNode& node, int32_t continuation);
    int32_t build_fragment(const Dfa& dfa, int32_t continuation);
    int32_t new_state();

    const Grammar& grammar_;
    const std::vector<uint8_t>& inline_rule_;
    Nfa& nfa_;
    int32_t max_states_;
    std::unordered_map<uint64_t, int32_t> memo_;
    std::vector<uint8_t> rule_called_;
    std::vector<int32_t> called_;
    std::vector<uint8_t> inlining_;  // per rule: being expanded now (guards against recursion)
};

}  // namespace deepinfer::grammar
