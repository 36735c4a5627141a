#include "grammar/grammar_ir.h"

namespace deepinfer::grammar {

Grammar::Grammar() {
    empty_ = add_node({ExprKind::kEmpty});
    nothing_ = add_node({ExprKind::kNothing});
}

ExprId Grammar::add_node(ExprNode n) {
    nodes_.push_back(n);
    return static_cast<ExprId>(nodes_.size() - 1);
}

ExprId Grammar::bytes(const ByteSet& set) {
    if (set.empty()) return nothing_;
    auto& candidates = byte_set_index_[set.hash()];
    for (int32_t index : candidates)
        if (byte_sets_[index] == set) return add_node({ExprKind::kBytes, index});
    byte_sets_.push_back(set);
    candidates.push_back(static_cast<int32_t>(byte_sets_.size() - 1));
    return add_node({ExprKind::kBytes, candidates.back()});
}

ExprId Grammar::literal(std::string_view text) {
    std::vector<ExprId> items;
    items.reserve(text.size());
    for (char c : text) items.push_back(byte(static_cast<uint8_t>(c)));
    return seq(items);
}

ExprId Grammar::add_list(ExprKind kind, const std::vector<ExprId>& items) {
    ExprNode n{kind};
    n.begin = static_cast<int32_t>(children_.size());
    n.count = static_cast<int32_t>(items.size());
    children_.insert(children_.end(), items.begin(), items.end());
    return add_node(n);
}

ExprId Grammar::seq(std::span<const ExprId> items) {
    std::vector<ExprId> kept;
    for (ExprId e : items) {
        const ExprNode& n = nodes_[e];
        if (n.kind == ExprKind::kNothing) return nothing_;
        if (n.kind == ExprKind::kEmpty) continue;
        kept.push_back(e);  // nested sequences stay nested: shared suffixes keep sharing NFA states
    }
    if (kept.empty()) return empty_;
    if (kept.size() == 1) return kept[0];
    return add_list(ExprKind::kSeq, kept);
}

ExprId Grammar::alt(std::span<const ExprId> items) {
    std::vector<ExprId> kept;
    for (ExprId e : items)
        if (nodes_[e].kind != ExprKind::kNothing) kept.push_back(e);
    if (kept.empty()) return nothing_;
    if (kept.size() == 1) return kept[0];
    return add_list(ExprKind::kAlt, kept);
}

ExprId Grammar::repeat(ExprId item, int32_t min, int32_t max) {
    if (max != kUnbounded && max < min) return nothing_;
    if (max == 0) return empty_;
    const ExprNode& n = nodes_[item];
    if (n.kind == ExprKind::kEmpty) return empty_;
    if (n.kind == ExprKind::kNothing) return min == 0 ? empty_ : nothing_;
    if (min == 1 && max == 1) return item;
    ExprNode r{ExprKind::kRepeat, item};
    r.min = min;
    r.max = max;
    return add_node(r);
}

ExprId Grammar::automaton(Dfa dfa) {
    if (dfa.language_is_empty()) return nothing_;
    fragments_.push_back(std::move(dfa));
    return add_node({ExprKind::kAutomaton, static_cast<int32_t>(fragments_.size() - 1)});
}

int32_t Grammar::add_rule(std::string name) {
    rules_.push_back({std::move(name), -1, true});
    int32_t id = static_cast<int32_t>(rules_.size() - 1);
    rule_refs_.push_back(add_node({ExprKind::kRule, id}));
    return id;
}

ExprId Grammar::rule_ref(int32_t rule) { return rule_refs_[rule]; }

}  // namespace deepinfer::grammar
