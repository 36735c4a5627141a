#include "grammar/determinize.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

#include "grammar/grammar_error.h"

namespace deepinfer::grammar {

ByteClasses ByteClasses::partition(std::span<const ByteSet> sets) {
    ByteClasses out;
    std::array<int32_t, 256> cls{};
    int32_t count = 1;
    for (const ByteSet& set : sets) {
        // Split every class into its members inside and outside the set.
        std::vector<int32_t> inside(count, -1), outside(count, -1);
        int32_t next_count = 0;
        for (int b = 0; b < 256; ++b) {
            auto& slot = set.contains(static_cast<uint8_t>(b)) ? inside[cls[b]] : outside[cls[b]];
            if (slot < 0) slot = next_count++;
            cls[b] = slot;
        }
        count = next_count;
    }
    out.count = count;
    for (int b = 0; b < 256; ++b) out.of_byte[b] = static_cast<uint8_t>(cls[b]);
    out.of_set.resize(sets.size());
    for (size_t i = 0; i < sets.size(); ++i) {
        std::vector<uint8_t> seen(count, 0);
        for (int b = 0; b < 256; ++b)
            if (sets[i].contains(static_cast<uint8_t>(b)) && !seen[cls[b]]) {
                seen[cls[b]] = 1;
                out.of_set[i].push_back(static_cast<uint8_t>(cls[b]));
            }
    }
    return out;
}

namespace {

class SubsetBuilder {
public:
    SubsetBuilder(const Nfa& nfa, const ByteClasses& classes, int32_t accept, int32_t max_states)
        : nfa_(nfa), classes_(classes), accept_(accept), max_states_(max_states), mark_(nfa.num_states(), 0) {}

    RuleDfa run(int32_t start) {
        std::vector<int32_t> seed{start};
        intern(closure(seed));
        std::vector<std::vector<int32_t>> by_class(classes_.count);
        std::map<int32_t, std::vector<int32_t>> by_rule;
        for (int32_t d = 0; d < static_cast<int32_t>(subsets_.size()); ++d) {
            for (auto& v : by_class) v.clear();
            by_rule.clear();
            bool accepting = false;
            for (int32_t s : subsets_[d]) {
                if (s == accept_) accepting = true;
                for (const NfaEdge& e : nfa_.edges(s)) {
                    if (e.label >= 0) {
                        for (uint8_t c : classes_.of_set[e.label]) by_class[c].push_back(e.target);
                    } else if (e.label <= Nfa::kCallBase) {
                        by_rule[Nfa::called_rule(e.label)].push_back(e.target);
                    }
                }
            }
            out_.accepting.push_back(accepting);
            for (int32_t c = 0; c < classes_.count; ++c)
                out_.next.push_back(by_class[c].empty() ? -1 : intern(closure(by_class[c])));
            std::vector<RuleCall> calls;
            for (auto& [rule, targets] : by_rule) calls.push_back({rule, intern(closure(targets))});
            out_.calls.push_back(std::move(calls));
        }
        out_.num_states = static_cast<int32_t>(subsets_.size());
        return std::move(out_);
    }

private:
    // Epsilon closure, keeping only the states that matter for identity: those with a non-epsilon
    // edge, and the accept state.
    std::vector<int32_t> closure(const std::vector<int32_t>& seeds) {
        ++generation_;
        std::vector<int32_t> todo, kept;
        for (int32_t s : seeds)
            if (mark_[s] != generation_) mark_[s] = generation_, todo.push_back(s);
        while (!todo.empty()) {
            int32_t s = todo.back();
            todo.pop_back();
            bool important = s == accept_;
            for (const NfaEdge& e : nfa_.edges(s)) {
                if (e.label != Nfa::kEpsilon) {
                    important = true;
                } else if (mark_[e.target] != generation_) {
                    mark_[e.target] = generation_;
                    todo.push_back(e.target);
                }
            }
            if (important) kept.push_back(s);
        }
        std::sort(kept.begin(), kept.end());
        return kept;
    }

    int32_t intern(std::vector<int32_t> subset) {
        std::string key(reinterpret_cast<const char*>(subset.data()), subset.size() * sizeof(int32_t));
        auto [it, added] = ids_.emplace(std::move(key), static_cast<int32_t>(subsets_.size()));
        if (added) {
            if (static_cast<int32_t>(subsets_.size()) >= max_states_)
                grammar_fail("grammar too large: more than {} DFA states in one rule", max_states_);
            subsets_.push_back(std::move(subset));
        }
        return it->second;
    }

    const Nfa& nfa_;
    const ByteClasses& classes_;
    int32_t accept_;
    int32_t max_states_;
    std::vector<uint32_t> mark_;
    uint32_t generation_ = 0;
    std::vector<std::vector<int32_t>> subsets_;
    std::unordered_map<std::string, int32_t> ids_;
    RuleDfa out_;
};

}  // namespace

RuleDfa determinize(const Nfa& nfa, const ByteClasses& classes, int32_t start, int32_t accept, int32_t max_states) {
    return SubsetBuilder(nfa, classes, accept, max_states).run(start);
}

Dfa to_dfa(const RuleDfa& rule, const ByteClasses& classes) {
    Dfa dfa;
    dfa.byte_class = classes.of_byte;
    dfa.num_classes = classes.count;
    dfa.next = rule.next;
    dfa.accepting = rule.accepting;
    dfa.start = 0;
    return dfa_trim(dfa);
}

}  // namespace deepinfer::grammar
