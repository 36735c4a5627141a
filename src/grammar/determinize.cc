#include "grammar/determinize.h"

#include <algorithm>
#include <unordered_map>

#include "grammar/grammar_error.h"

namespace deepinfer::grammar {

ByteClasses ByteClasses::partition(std::span<const ByteSet> sets) {
    // Refine one class per step: every set splits each class it cuts into its inside and outside.
    std::vector<ByteSet> classes{ByteSet::all()};
    for (const ByteSet& set : sets) {
        size_t n = classes.size();
        for (size_t c = 0; c < n; ++c) {
            ByteSet inside = classes[c] & set;
            if (inside.empty() || inside == classes[c]) continue;
            classes.push_back(classes[c] & set.complement());
            classes[c] = inside;
        }
    }
    ByteClasses out;
    out.count = static_cast<int32_t>(classes.size());
    for (int32_t c = 0; c < out.count; ++c)
        for (int b = 0; b < 256; ++b)
            if (classes[c].contains(static_cast<uint8_t>(b))) out.of_byte[b] = static_cast<uint8_t>(c);
    out.of_set.resize(sets.size());
    for (size_t i = 0; i < sets.size(); ++i)
        for (int32_t c = 0; c < out.count; ++c)
            if (!(classes[c] & sets[i]).empty()) out.of_set[i].push_back(static_cast<uint8_t>(c));
    return out;
}

namespace {

class SubsetBuilder {
public:
    SubsetBuilder(const Nfa& nfa, const ByteClasses& classes, int32_t accept, int32_t max_states)
        : nfa_(nfa), classes_(classes), accept_(accept), max_states_(max_states), mark_(nfa.num_states(), 0),
          by_class_(classes.count) {}

    RuleDfa run(int32_t start) {
        seeds_.assign(1, start);
        intern_closure();
        std::vector<std::pair<int32_t, int32_t>> calls;  // (rule, target NFA state)
        for (int32_t d = 0; d < static_cast<int32_t>(offsets_.size()); ++d) {
            for (auto& v : by_class_) v.clear();
            calls.clear();
            bool accepting = false;
            for (int32_t k = offsets_[d], e = end_of(d); k < e; ++k) {
                int32_t s = storage_[k];
                if (s == accept_) accepting = true;
                for (const NfaEdge& edge : nfa_.edges(s)) {
                    if (edge.label >= 0) {
                        for (uint8_t c : classes_.of_set[edge.label]) by_class_[c].push_back(edge.target);
                    } else if (edge.label <= Nfa::kCallBase) {
                        calls.emplace_back(Nfa::called_rule(edge.label), edge.target);
                    }
                }
            }
            out_.accepting.push_back(accepting);
            for (int32_t c = 0; c < classes_.count; ++c) {
                if (by_class_[c].empty()) {
                    out_.next.push_back(-1);
                } else {
                    seeds_.swap(by_class_[c]);
                    out_.next.push_back(intern_closure());
                    seeds_.swap(by_class_[c]);
                }
            }
            std::sort(calls.begin(), calls.end());
            std::vector<RuleCall> rule_calls;
            for (size_t i = 0; i < calls.size();) {
                size_t j = i;
                seeds_.clear();
                while (j < calls.size() && calls[j].first == calls[i].first) seeds_.push_back(calls[j++].second);
                rule_calls.push_back({calls[i].first, intern_closure()});
                i = j;
            }
            out_.calls.push_back(std::move(rule_calls));
        }
        out_.num_states = static_cast<int32_t>(offsets_.size());
        return std::move(out_);
    }

private:
    int32_t end_of(int32_t d) const {
        return d + 1 < static_cast<int32_t>(offsets_.size()) ? offsets_[d + 1] : static_cast<int32_t>(storage_.size());
    }

    // Epsilon closure of seeds_ into closure_, keeping only the states that matter for identity:
    // those with a non-epsilon edge, and the accept state.
    void closure() {
        ++generation_;
        todo_.clear();
        closure_.clear();
        for (int32_t s : seeds_)
            if (mark_[s] != generation_) mark_[s] = generation_, todo_.push_back(s);
        while (!todo_.empty()) {
            int32_t s = todo_.back();
            todo_.pop_back();
            bool important = s == accept_;
            for (const NfaEdge& e : nfa_.edges(s)) {
                if (e.label != Nfa::kEpsilon) {
                    important = true;
                } else if (mark_[e.target] != generation_) {
                    mark_[e.target] = generation_;
                    todo_.push_back(e.target);
                }
            }
            if (important) closure_.push_back(s);
        }
        std::sort(closure_.begin(), closure_.end());
    }

    // The DFA state of the closure of seeds_, added if new.
    int32_t intern_closure() {
        closure();
        uint64_t h = closure_.size();
        for (int32_t s : closure_) h = (h ^ uint32_t(s)) * 0x100000001B3ull;
        h ^= h >> 29;
        if (2 * (offsets_.size() + 1) > table_.size()) grow_table();
        size_t mask = table_.size() - 1;
        for (size_t slot = h & mask;; slot = (slot + 1) & mask) {
            int32_t id = table_[slot];
            if (id < 0) {
                if (static_cast<int32_t>(offsets_.size()) >= max_states_)
                    grammar_fail("grammar too large: more than {} DFA states in one rule", max_states_);
                id = static_cast<int32_t>(offsets_.size());
                offsets_.push_back(static_cast<int32_t>(storage_.size()));
                hashes_.push_back(h);
                storage_.insert(storage_.end(), closure_.begin(), closure_.end());
                table_[slot] = id;
                return id;
            }
            int32_t begin = offsets_[id], size = end_of(id) - begin;
            if (hashes_[id] == h && size == static_cast<int32_t>(closure_.size()) &&
                std::equal(closure_.begin(), closure_.end(), storage_.begin() + begin))
                return id;
        }
    }

    void grow_table() {
        std::vector<int32_t> bigger(std::max<size_t>(64, table_.size() * 2), -1);
        for (int32_t id = 0; id < static_cast<int32_t>(offsets_.size()); ++id)
            for (size_t slot = hashes_[id] & (bigger.size() - 1);; slot = (slot + 1) & (bigger.size() - 1))
                if (bigger[slot] < 0) {
                    bigger[slot] = id;
                    break;
                }
        table_.swap(bigger);
    }

    const Nfa& nfa_;
    const ByteClasses& classes_;
    int32_t accept_;
    int32_t max_states_;
    std::vector<uint32_t> mark_;
    uint32_t generation_ = 0;
    std::vector<int32_t> seeds_, todo_, closure_;
    std::vector<std::vector<int32_t>> by_class_;
    std::vector<int32_t> storage_, offsets_;  // DFA state d: storage_[offsets_[d], end_of(d))
    std::vector<uint64_t> hashes_;  // per DFA state
    std::vector<int32_t> table_;    // open addressing: DFA state or -1
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
