#include "grammar/pda.h"

#include <algorithm>

#include "grammar/determinize.h"
#include "grammar/grammar_error.h"
#include "grammar/nfa.h"
#include "grammar/rule_graph.h"

namespace deepinfer::grammar {

class PdaAssembler {
public:
    PdaAssembler(const Grammar& grammar, const PdaLimits& limits) : grammar_(grammar), limits_(limits) {}

    Pda run() {
        if (grammar_.root() < 0) grammar_fail("grammar has no root rule");
        RuleGraph graph = analyze_rules(grammar_);
        std::vector<uint8_t> inline_rule(grammar_.num_rules());
        for (int32_t r = 0; r < grammar_.num_rules(); ++r) inline_rule[r] = !graph.recursive[r] && grammar_.rule(r).inlinable;
        inline_rule[grammar_.root()] = 0;

        Nfa nfa(grammar_.byte_sets());
        NfaBuilder builder(grammar_, inline_rule, nfa, limits_.max_nfa_states);
        // The root first; every rule a call reaches gets its own fragment too. A called rule that
        // is one precompiled automaton keeps it as its DFA (no NFA, no subset construction); its
        // byte classes join the partition.
        std::vector<int32_t> rules{grammar_.root()};
        std::vector<std::pair<int32_t, int32_t>> ends;  // per called rule: (start, accept), or -1 for an automaton
        for (size_t i = 0; i < rules.size(); ++i) {
            const GrammarRule& rule = grammar_.rule(rules[i]);
            if (rule.body < 0) grammar_fail("rule '{}' is used but never defined", rule.name);
            const ExprNode& body = grammar_.node(rule.body);
            if (body.kind == ExprKind::kAutomaton) {
                const Dfa& dfa = grammar_.fragment(body.arg);
                std::vector<ByteSet> class_sets(dfa.num_classes);
                for (int b = 0; b < 256; ++b) class_sets[dfa.byte_class[b]].add(static_cast<uint8_t>(b));
                for (const ByteSet& set : class_sets) nfa.intern(set);
                ends.emplace_back(-1, body.arg);
                continue;
            }
            int32_t accept = nfa.add_state();
            ends.emplace_back(builder.build(rule.body, accept), accept);
            for (int32_t r : builder.called_rules())
                if (std::find(rules.begin(), rules.end(), r) == rules.end()) rules.push_back(r);
        }
        nfa.finish();
        ByteClasses classes = ByteClasses::partition(nfa.byte_sets());
        std::vector<RuleDfa> dfas;
        for (auto [start, accept] : ends)
            dfas.push_back(start < 0 ? from_fragment(grammar_.fragment(accept), classes)
                                     : determinize(nfa, classes, start, accept, limits_.max_rule_states));
        assemble(rules, dfas, classes);
        trim();
        check_left_recursion(rules);
        return std::move(pda_);
    }

private:
    // The fragment's table over the grammar's byte classes, renumbered so its start is state 0.
    static RuleDfa from_fragment(const Dfa& dfa, const ByteClasses& classes) {
        RuleDfa out;
        out.num_states = dfa.num_states();
        auto renumber = [&](int32_t s) { return s == dfa.start ? 0 : s == 0 ? dfa.start : s; };
        std::vector<uint8_t> representative(classes.count);
        for (int b = 255; b >= 0; --b) representative[classes.of_byte[b]] = static_cast<uint8_t>(b);
        out.next.assign(size_t(out.num_states) * classes.count, -1);
        out.accepting.assign(out.num_states, 0);
        out.calls.resize(out.num_states);
        for (int32_t s = 0; s < out.num_states; ++s) {
            int32_t to = renumber(s);
            out.accepting[to] = dfa.accepting[s];
            for (int32_t c = 0; c < classes.count; ++c) {
                int32_t t = dfa.step(s, representative[c]);
                out.next[size_t(to) * classes.count + c] = t == Dfa::kDead ? -1 : renumber(t);
            }
        }
        return out;
    }

    void assemble(const std::vector<int32_t>& rules, const std::vector<RuleDfa>& dfas, const ByteClasses& classes) {
        pda_.byte_class_ = classes.of_byte;
        pda_.num_classes_ = classes.count;
        for (int32_t r = 0; r < grammar_.num_rules(); ++r) pda_.rule_names_.push_back(grammar_.rule(r).name);
        pda_.called_rules_ = rules;
        std::vector<int32_t> base(grammar_.num_rules(), -1);
        int32_t total = 1;  // state 0: dead
        for (size_t i = 0; i < rules.size(); ++i) base[rules[i]] = total, total += dfas[i].num_states;
        if (total > limits_.max_total_states)
            grammar_fail("grammar too large: more than {} automaton states", limits_.max_total_states);
        pda_.next_.assign(size_t(total) * classes.count, Pda::kDead);
        pda_.accepting_.assign(total, 0);
        pda_.rule_of_.assign(total, -1);
        pda_.call_begin_.assign(total + 1, 0);
        std::vector<std::vector<CallEdge>> calls(total);
        for (size_t i = 0; i < rules.size(); ++i) {
            const RuleDfa& d = dfas[i];
            int32_t b = base[rules[i]];
            for (int32_t s = 0; s < d.num_states; ++s) {
                for (int32_t c = 0; c < classes.count; ++c) {
                    int32_t t = d.next[size_t(s) * classes.count + c];
                    pda_.next_[size_t(b + s) * classes.count + c] = t < 0 ? Pda::kDead : b + t;
                }
                pda_.accepting_[b + s] = d.accepting[s];
                pda_.rule_of_[b + s] = rules[i];
                for (const RuleCall& call : d.calls[s]) calls[b + s].push_back({base[call.rule], b + call.target});
            }
        }
        for (int32_t s = 0; s < total; ++s) {
            pda_.call_begin_[s + 1] = pda_.call_begin_[s] + static_cast<int32_t>(calls[s].size());
            pda_.calls_.insert(pda_.calls_.end(), calls[s].begin(), calls[s].end());
        }
        pda_.start_ = base[grammar_.root()];
    }

    // A state is productive when its rule can still end from it. Edges into unproductive states
    // are removed, so every state a matcher can reach leads to a complete output.
    void trim() {
        int32_t n = pda_.num_states(), nc = pda_.num_classes_;
        // Predecessors grouped by target: byte edges, and both ends of every call.
        std::vector<int32_t> begin(n + 1, 0), preds;
        auto each_edge = [&](auto&& fn) {
            for (int32_t s = 1; s < n; ++s) {
                for (int32_t c = 0; c < nc; ++c)
                    if (int32_t t = pda_.next_[size_t(s) * nc + c]; t != Pda::kDead) fn(s, t);
                for (const CallEdge& e : pda_.calls(s)) fn(s, e.callee_start), fn(s, e.return_state);
            }
        };
        each_edge([&](int32_t, int32_t t) { ++begin[t + 1]; });
        for (int32_t s = 0; s < n; ++s) begin[s + 1] += begin[s];
        preds.resize(begin[n]);
        std::vector<int32_t> fill(begin.begin(), begin.end() - 1);
        each_edge([&](int32_t s, int32_t t) { preds[fill[t]++] = s; });
        std::vector<uint8_t> productive(n, 0);
        auto derives = [&](int32_t s) {
            if (pda_.accepting_[s]) return true;
            for (int32_t c = 0; c < nc; ++c)
                if (productive[pda_.next_[size_t(s) * nc + c]]) return true;
            for (const CallEdge& e : pda_.calls(s))
                if (productive[e.callee_start] && productive[e.return_state]) return true;
            return false;
        };
        std::vector<int32_t> todo;
        for (int32_t s = 1; s < n; ++s)
            if (pda_.accepting_[s]) productive[s] = 1, todo.push_back(s);
        while (!todo.empty()) {
            int32_t s = todo.back();
            todo.pop_back();
            for (int32_t k = begin[s]; k < begin[s + 1]; ++k)
                if (int32_t p = preds[k]; !productive[p] && derives(p)) productive[p] = 1, todo.push_back(p);
        }
        for (auto& t : pda_.next_)
            if (!productive[t]) t = Pda::kDead;
        std::vector<CallEdge> kept;
        std::vector<int32_t> call_begin(n + 1, 0);
        for (int32_t s = 0; s < n; ++s) {
            for (const CallEdge& e : pda_.calls(s))
                if (productive[s] && productive[e.callee_start] && productive[e.return_state]) kept.push_back(e);
            call_begin[s + 1] = static_cast<int32_t>(kept.size());
        }
        pda_.calls_ = std::move(kept);
        pda_.call_begin_ = std::move(call_begin);
        if (!productive[pda_.start_]) pda_.start_ = Pda::kDead;
    }

    // A rule that can call itself before reading a byte would make the stack grow without input.
    void check_left_recursion(const std::vector<int32_t>& rules);

    const Grammar& grammar_;
    PdaLimits limits_;
    Pda pda_;
};

void PdaAssembler::check_left_recursion(const std::vector<int32_t>& rules) {
    int32_t num_rules = grammar_.num_rules();
    std::vector<int32_t> start_of(num_rules, -1);
    for (int32_t s = 1; s < pda_.num_states(); ++s)
        if (start_of[pda_.rule_of_[s]] < 0) start_of[pda_.rule_of_[s]] = s;
    // Rules that can match the empty string, then the rules each rule can call before any byte.
    std::vector<uint8_t> nullable(num_rules, 0);
    auto explore = [&](int32_t rule, std::vector<int32_t>* left_calls) {
        std::vector<int32_t> todo{start_of[rule]}, seen{start_of[rule]};
        bool reaches_end = false;
        while (!todo.empty()) {
            int32_t s = todo.back();
            todo.pop_back();
            if (pda_.accepting_[s]) reaches_end = true;
            for (const CallEdge& e : pda_.calls(s)) {
                int32_t callee = pda_.rule_of_[e.callee_start];
                if (left_calls) left_calls->push_back(callee);
                if (nullable[callee] && std::find(seen.begin(), seen.end(), e.return_state) == seen.end())
                    seen.push_back(e.return_state), todo.push_back(e.return_state);
            }
        }
        return reaches_end;
    };
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r : rules)
            if (start_of[r] >= 0 && !nullable[r] && explore(r, nullptr)) nullable[r] = 1, changed = true;
    }
    std::vector<std::vector<int32_t>> left(num_rules);
    for (int32_t r : rules)
        if (start_of[r] >= 0) explore(r, &left[r]);
    std::vector<uint8_t> color(num_rules, 0);  // 0 new, 1 on path, 2 done
    std::vector<int32_t> path;
    auto visit = [&](auto&& self, int32_t r) -> void {
        color[r] = 1;
        path.push_back(r);
        for (int32_t c : left[r]) {
            if (color[c] == 1) {
                std::string cycle;
                auto from = std::find(path.begin(), path.end(), c);
                for (auto it = from; it != path.end(); ++it) cycle += grammar_.rule(*it).name + " -> ";
                grammar_fail("left recursion is not supported: {}{}", cycle, grammar_.rule(c).name);
            }
            if (color[c] == 0) self(self, c);
        }
        path.pop_back();
        color[r] = 2;
    };
    for (int32_t r : rules)
        if (color[r] == 0) visit(visit, r);
}

Pda build_pda(const Grammar& grammar, const PdaLimits& limits) { return PdaAssembler(grammar, limits).run(); }

Dfa regular_dfa(const Grammar& grammar, ExprId expr, const PdaLimits& limits) {
    std::vector<uint8_t> inline_all(grammar.num_rules(), 1);
    Nfa nfa(grammar.byte_sets());
    NfaBuilder builder(grammar, inline_all, nfa, limits.max_nfa_states);
    int32_t accept = nfa.add_state();
    int32_t start = builder.build(expr, accept);
    if (!builder.called_rules().empty())
        grammar_fail("rule '{}' is recursive where a regular language is needed", grammar.rule(builder.called_rules()[0]).name);
    nfa.finish();
    ByteClasses classes = ByteClasses::partition(nfa.byte_sets());
    return to_dfa(determinize(nfa, classes, start, accept, limits.max_rule_states), classes);
}

}  // namespace deepinfer::grammar
