#pragma once
// The grammar intermediate representation every front-end (regex, EBNF, JSON Schema) lowers to:
// named rules whose bodies are expressions over byte sets, rule references and precompiled
// automaton fragments. Expressions form a DAG (a node may be shared), which keeps the object
// grammars of JSON Schema linear in the number of properties.
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/byte_set.h"
#include "grammar/dfa.h"

namespace deepinfer::grammar {

using ExprId = int32_t;

enum class ExprKind : uint8_t { kEmpty, kNothing, kBytes, kSeq, kAlt, kRepeat, kRule, kAutomaton };

struct ExprNode {
    ExprKind kind;
    int32_t arg = 0;               // kBytes: byte set; kRepeat: child; kRule: rule; kAutomaton: fragment
    int32_t begin = 0, count = 0;  // kSeq / kAlt: children_[begin, begin + count)
    int32_t min = 0, max = 0;      // kRepeat: bounds, max = kUnbounded for no upper bound
};

struct GrammarRule {
    std::string name;
    ExprId body = -1;        // -1 until set_rule_body
    bool inlinable = true;   // false: always entered through a call (keeps large shared pieces single)
};

class Grammar {
public:
    static constexpr int32_t kUnbounded = -1;

    Grammar();

    ExprId empty() const { return empty_; }
    ExprId nothing() const { return nothing_; }
    ExprId bytes(const ByteSet& set);
    ExprId byte(uint8_t b) { return bytes(ByteSet::of(b)); }
    ExprId literal(std::string_view text);
    ExprId seq(std::span<const ExprId> items);
    ExprId seq(std::initializer_list<ExprId> items) { return seq(std::span<const ExprId>(items.begin(), items.size())); }
    ExprId alt(std::span<const ExprId> items);
    ExprId alt(std::initializer_list<ExprId> items) { return alt(std::span<const ExprId>(items.begin(), items.size())); }
    ExprId repeat(ExprId item, int32_t min, int32_t max);
    ExprId optional(ExprId item) { return repeat(item, 0, 1); }
    ExprId star(ExprId item) { return repeat(item, 0, kUnbounded); }
    ExprId plus(ExprId item) { return repeat(item, 1, kUnbounded); }
    ExprId automaton(Dfa dfa);

    int32_t add_rule(std::string name);
    void set_rule_body(int32_t rule, ExprId body) { rules_[rule].body = body; }
    void set_rule_inlinable(int32_t rule, bool inlinable) { rules_[rule].inlinable = inlinable; }
    ExprId rule_ref(int32_t rule);
    void set_root(int32_t rule) { root_ = rule; }

    int32_t root() const { return root_; }
    const ExprNode& node(ExprId id) const { return nodes_[id]; }
    std::span<const ExprId> children(const ExprNode& n) const { return {children_.data() + n.begin, size_t(n.count)}; }
    const ByteSet& byte_set(int32_t index) const { return byte_sets_[index]; }
    const std::vector<ByteSet>& byte_sets() const { return byte_sets_; }
    int32_t num_byte_sets() const { return static_cast<int32_t>(byte_sets_.size()); }
    const Dfa& fragment(int32_t index) const { return fragments_[index]; }
    const GrammarRule& rule(int32_t id) const { return rules_[id]; }
    int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }
    size_t num_nodes() const { return nodes_.size(); }

private:
    ExprId add_node(ExprNode n);
    ExprId add_list(ExprKind kind, const std::vector<ExprId>& items);

    std::vector<ExprNode> nodes_;
    std::vector<ExprId> children_;
    std::vector<ByteSet> byte_sets_;
    std::unordered_map<size_t, std::vector<int32_t>> byte_set_index_;  // hash -> candidate indices
    std::vector<Dfa> fragments_;
    std::vector<GrammarRule> rules_;
    std::vector<ExprId> rule_refs_;  // per rule: its kRule node
    ExprId empty_ = 0, nothing_ = 1;
    int32_t root_ = -1;
};

}  // namespace deepinfer::grammar
