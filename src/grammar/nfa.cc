#include "grammar/nfa.h"

#include <algorithm>

#include "grammar/grammar_error.h"

namespace deepinfer::grammar {

Nfa::Nfa(std::vector<ByteSet> byte_sets) : byte_sets_(std::move(byte_sets)) {
    for (size_t i = 0; i < byte_sets_.size(); ++i) interned_[byte_sets_[i].hash()].push_back(static_cast<int32_t>(i));
}

int32_t Nfa::intern(const ByteSet& set) {
    auto& candidates = interned_[set.hash()];
    for (int32_t index : candidates)
        if (byte_sets_[index] == set) return index;
    byte_sets_.push_back(set);
    candidates.push_back(static_cast<int32_t>(byte_sets_.size() - 1));
    return candidates.back();
}

void Nfa::finish() {
    offsets_.assign(num_states_ + 1, 0);
    for (const auto& [from, edge] : pending_) ++offsets_[from + 1];
    for (int32_t s = 0; s < num_states_; ++s) offsets_[s + 1] += offsets_[s];
    edges_.resize(pending_.size());
    std::vector<int32_t> fill(offsets_.begin(), offsets_.end() - 1);
    for (const auto& [from, edge] : pending_) edges_[fill[from]++] = edge;
}

NfaBuilder::NfaBuilder(const Grammar& grammar, const std::vector<uint8_t>& inline_rule, Nfa& nfa, int32_t max_states)
    : grammar_(grammar), inline_rule_(inline_rule), nfa_(nfa), max_states_(max_states),
      rule_called_(grammar.num_rules(), 0), inlining_(grammar.num_rules(), 0) {}

int32_t NfaBuilder::new_state() {
    if (nfa_.num_states() >= max_states_)
        grammar_fail("grammar too large: more than {} automaton states (large repetition counts or lengths?)", max_states_);
    return nfa_.add_state();
}

int32_t NfaBuilder::build(ExprId expr, int32_t continuation) {
    const ExprNode& n = grammar_.node(expr);
    if (n.kind == ExprKind::kEmpty) return continuation;
    uint64_t key = (uint64_t(uint32_t(expr)) << 32) | uint32_t(continuation);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    int32_t state = build_uncached(expr, continuation);
    memo_.emplace(key, state);
    return state;
}

int32_t NfaBuilder::build_uncached(ExprId expr, int32_t continuation) {
    const ExprNode& n = grammar_.node(expr);
    switch (n.kind) {
        case ExprKind::kEmpty:
            return continuation;
        case ExprKind::kNothing:
            return new_state();
        case ExprKind::kBytes: {
            int32_t s = new_state();
            nfa_.add_edge(s, n.arg, continuation);
            return s;
        }
        case ExprKind::kSeq: {
            auto items = grammar_.children(n);
            int32_t c = continuation;
            for (auto it = items.rbegin(); it != items.rend(); ++it) c = build(*it, c);
            return c;
        }
        case ExprKind::kAlt: {
            int32_t s = new_state();
            for (ExprId item : grammar_.children(n)) nfa_.add_edge(s, Nfa::kEpsilon, build(item, continuation));
            return s;
        }
        case ExprKind::kRepeat:
            return build_repeat(n, continuation);
        case ExprKind::kAutomaton:
            return build_fragment(grammar_.fragment(n.arg), continuation);
        case ExprKind::kRule: {
            const GrammarRule& rule = grammar_.rule(n.arg);
            if (rule.body < 0) grammar_fail("rule '{}' is used but never defined", rule.name);
            if (inline_rule_[n.arg] && !inlining_[n.arg]) {
                inlining_[n.arg] = 1;
                int32_t s = build(rule.body, continuation);
                inlining_[n.arg] = 0;
                return s;
            }
            if (!rule_called_[n.arg]) {
                rule_called_[n.arg] = 1;
                called_.push_back(n.arg);
            }
            int32_t s = new_state();
            nfa_.add_edge(s, Nfa::call_label(n.arg), continuation);
            return s;
        }
    }
    return continuation;
}

int32_t NfaBuilder::build_repeat(const ExprNode& n, int32_t continuation) {
    int32_t cur = continuation;
    if (n.max == Grammar::kUnbounded) {
        int32_t loop = new_state();
        nfa_.add_edge(loop, Nfa::kEpsilon, continuation);
        nfa_.add_edge(loop, Nfa::kEpsilon, build(n.arg, loop));
        cur = loop;
    } else {
        // Optional copies first (built back to front): each may stop and go to the continuation.
        for (int32_t i = 0; i < n.max - n.min; ++i) {
            int32_t s = new_state();
            nfa_.add_edge(s, Nfa::kEpsilon, continuation);
            nfa_.add_edge(s, Nfa::kEpsilon, build(n.arg, cur));
            cur = s;
        }
    }
    for (int32_t i = 0; i < n.min; ++i) cur = build(n.arg, cur);
    return cur;
}

int32_t NfaBuilder::build_fragment(const Dfa& dfa, int32_t continuation) {
    if (nfa_.num_states() + dfa.num_states() > max_states_)
        grammar_fail("grammar too large: more than {} automaton states", max_states_);
    std::vector<ByteSet> class_sets(dfa.num_classes);
    for (int b = 0; b < 256; ++b) class_sets[dfa.byte_class[b]].add(static_cast<uint8_t>(b));
    int32_t base = nfa_.num_states();
    for (int32_t s = 0; s < dfa.num_states(); ++s) nfa_.add_state();
    for (int32_t s = 0; s < dfa.num_states(); ++s) {
        // Edges of one state that go to the same target share one byte set.
        std::vector<std::pair<int32_t, ByteSet>> by_target;
        for (int32_t c = 0; c < dfa.num_classes; ++c) {
            int32_t t = dfa.next[size_t(s) * dfa.num_classes + c];
            if (t == Dfa::kDead) continue;
            auto it = std::find_if(by_target.begin(), by_target.end(), [t](const auto& p) { return p.first == t; });
            if (it == by_target.end()) by_target.push_back({t, class_sets[c]});
            else it->second.add(class_sets[c]);
        }
        for (const auto& [t, set] : by_target) nfa_.add_edge(base + s, nfa_.intern(set), base + t);
        if (dfa.accepting[s]) nfa_.add_edge(base + s, Nfa::kEpsilon, continuation);
    }
    return base + dfa.start;
}

}  // namespace deepinfer::grammar
