#include "grammar/json_schema.h"

#include "grammar/dfa.h"
#include "grammar/grammar_error.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/pda.h"

namespace deepinfer::grammar {

namespace {

constexpr int kMaxDepth = 64;
constexpr int kMaxAlternatives = 512;

uint8_t value_type(const Json& v) {
    if (v.is_null()) return json_type::kNull;
    if (v.is_boolean()) return json_type::kBoolean;
    if (v.is_string()) return json_type::kString;
    if (v.is_array()) return json_type::kArray;
    if (v.is_object()) return json_type::kObject;
    auto d = parse_decimal(v.dump());
    return d && d->is_integer() ? json_type::kInteger : json_type::kFraction;
}

// 1 is a multiple of step (so is every integer): step = m / 10^k with m dividing 10^k.
bool divides_one(const Decimal& step) {
    if (step.is_zero() || step.negative) return false;
    std::string m = step.int_digits + step.frac_digits;
    m.erase(0, std::min(m.find_first_not_of('0'), m.size() - 1));
    if (m.size() > 18) return false;
    uint64_t value = std::stoull(m), power = 1;
    for (size_t i = 0; i < step.frac_digits.size() && power <= UINT64_MAX / 10; ++i) power *= 10;
    return step.frac_digits.size() <= 18 && power % value == 0;
}

uint8_t effective_types(const SchemaNode& n) {
    if (!n.allowed_values) return n.types;
    uint8_t t = 0;
    for (const Json& v : *n.allowed_values) t |= value_type(v);
    return t & n.types;
}

}  // namespace

ExprId SchemaCompiler::ref_rule(const SchemaRef& target) {
    auto it = ref_rules_.find(target.schema);
    if (it != ref_rules_.end()) return g_.rule_ref(it->second);
    int32_t rule = g_.add_rule(prefix_ + "schema" + std::to_string(ref_rules_.size()));
    ref_rules_.emplace(target.schema, rule);
    g_.set_rule_body(rule, compile(parser_.parse(target), 0));
    return g_.rule_ref(rule);
}

ExprId SchemaCompiler::compile_conj(const SchemaConj& conj, int depth) {
    if (conj.empty()) return any_value();
    return compile(parser_.parse_conj(conj), depth + 1);
}

ExprId SchemaCompiler::compile(SchemaNode n, int depth) {
    if (depth > kMaxDepth) grammar_fail("schema nested deeper than {} levels", kMaxDepth);
    if (n.reference) return ref_rule(*n.reference);
    if (!n.negated.empty()) apply_not(n);
    if (!n.any_of.empty()) {
        auto group = std::move(n.any_of.back());
        n.any_of.pop_back();
        return alternatives(n, group, false, depth);
    }
    if (!n.one_of.empty()) {
        auto group = std::move(n.one_of.back());
        n.one_of.pop_back();
        return alternatives(n, group, true, depth);
    }
    if (n.types == 0) return g_.nothing();
    if (n.allowed_values) return compile_enum(n);
    if (only_types(n) && n.types == json_type::kAll) return any_value();
    return compile_types(n, depth);
}

ExprId SchemaCompiler::alternatives(const SchemaNode& base, const std::vector<SchemaRef>& group, bool exclusive, int depth) {
    if (group.size() > kMaxAlternatives) grammar_fail("more than {} alternatives in anyOf/oneOf", kMaxAlternatives);
    bool trivial_base = only_types(base) && base.types == json_type::kAll;
    std::vector<SchemaNode> nodes;
    std::vector<ExprId> exprs;
    for (const SchemaRef& ref : group) {
        // With nothing to merge, a bare $ref stays a rule reference (and may recurse).
        SchemaNode alt = trivial_base ? parser_.parse(ref) : base;
        if (!trivial_base) parser_.merge_into(alt, parser_.parse(ref));
        exprs.push_back(compile(alt, depth + 1));
        nodes.push_back(std::move(alt));
    }
    if (exclusive) check_exclusive(nodes, exprs);
    return g_.alt(exprs);
}

// oneOf is compiled as anyOf, which is exact only when no value satisfies two alternatives.
void SchemaCompiler::check_exclusive(const std::vector<SchemaNode>& nodes, const std::vector<ExprId>& exprs) {
    constexpr uint8_t kScalars = json_type::kNull | json_type::kBoolean | json_type::kNumber | json_type::kString;
    std::vector<std::optional<Dfa>> dfas(nodes.size());
    auto dfa_of = [&](size_t i) -> const Dfa* {
        if (!dfas[i]) {
            try {
                dfas[i] = regular_dfa(g_, exprs[i]);
            } catch (const GrammarError&) {
                dfas[i] = Dfa{};  // recursive: no language test (marked by zero classes below)
                dfas[i]->num_classes = 0;
            }
        }
        return dfas[i]->num_classes == 0 ? nullptr : &*dfas[i];
    };
    for (size_t i = 0; i < nodes.size(); ++i) {
        for (size_t j = i + 1; j < nodes.size(); ++j) {
            uint8_t common = effective_types(nodes[i]) & effective_types(nodes[j]);
            if (common == 0 || discriminated(nodes[i], nodes[j])) continue;
            // Disjoint languages mean disjoint values as long as every value has a spelling both
            // grammars accept: true for scalars, and for containers when keys are sorted.
            bool comparable = (common & ~kScalars) == 0 || options_.property_order == JsonPropertyOrder::kSorted;
            const Dfa* a = comparable ? dfa_of(i) : nullptr;
            const Dfa* b = a ? dfa_of(j) : nullptr;
            if (a && b && dfa_product(*a, *b, DfaProduct::kIntersection).language_is_empty()) continue;
            grammar_fail("unsupported JSON Schema keyword 'oneOf': alternatives {} and {} may both match a value", i, j);
        }
    }
}

// An object property required by both alternatives whose allowed values (const / enum) differ,
// or required by one and forbidden by the other.
bool SchemaCompiler::discriminated(const SchemaNode& a, const SchemaNode& b) {
    if ((effective_types(a) | effective_types(b)) & ~json_type::kObject) return false;
    auto forbids = [&](const SchemaNode& n, const std::string& name) {
        const PropertySchema* p = n.property(name);
        if (!p) return n.additional_forbidden;
        return parser_.parse_conj(p->schemas).types == 0;
    };
    for (const std::string& name : a.required) {
        if (forbids(b, name)) return true;
        if (!b.required.count(name)) continue;
        const PropertySchema *pa = a.property(name), *pb = b.property(name);
        if (!pa || !pb) continue;
        SchemaNode va = parser_.parse_conj(pa->schemas), vb = parser_.parse_conj(pb->schemas);
        if (!va.allowed_values || !vb.allowed_values) continue;
        bool overlap = false;
        for (const Json& v : *va.allowed_values)
            overlap = overlap || std::find(vb.allowed_values->begin(), vb.allowed_values->end(), v) != vb.allowed_values->end();
        if (!overlap) return true;
    }
    for (const std::string& name : b.required)
        if (forbids(a, name)) return true;
    return false;
}

void SchemaCompiler::apply_not(SchemaNode& n) {
    for (const SchemaRef& ref : n.negated) {
        SchemaNode m = parser_.parse(ref);
        if (!only_types(m)) grammar_fail("unsupported JSON Schema keyword 'not' (only 'not' of a type is supported)");
        n.types &= static_cast<uint8_t>(~m.types);
    }
    n.negated.clear();
}

ExprId SchemaCompiler::compile_enum(const SchemaNode& n) {
    std::vector<ExprId> alts;
    for (const Json& v : *n.allowed_values)
        if (value_allowed(n, v)) alts.push_back(literal_value(v));
    return g_.alt(alts);
}

// Whether an enum / const value also meets the node's other constraints, checked by running the
// value's compact spelling through the grammar those constraints compile to.
bool SchemaCompiler::value_allowed(const SchemaNode& n, const Json& v) {
    uint8_t type = value_type(v);
    if (!(n.types & type)) return false;
    if (type == json_type::kString) {
        std::string quoted = v.dump(-1, ' ', false, Json::error_handler_t::strict);
        return string_content_dfa(n).matches(std::string_view(quoted).substr(1, quoted.size() - 2));
    }
    if (type & json_type::kNumber) {
        if (n.numbers.lower.empty() && n.numbers.upper.empty() && n.multiple_of.empty()) return true;
        return regular_dfa(g_, number_value(n)).matches(parse_decimal(v.dump())->to_string());
    }
    if (type == json_type::kArray || type == json_type::kObject) {
        SchemaNode rest = n;
        rest.allowed_values.reset();
        if (!only_types(rest)) grammar_fail("enum / const of arrays or objects next to other constraints is not supported");
    }
    return true;
}

ExprId SchemaCompiler::number_value(const SchemaNode& n) {
    if (!n.multiple_of.empty()) {
        // Multiples are generated in plain decimal notation, intersected with every other bound.
        // A step of 1/q (0.5, 0.25, 1) puts no constraint on integers, which keep their exponents.
        SchemaNode rest = n;
        rest.multiple_of.clear();
        std::vector<Decimal> steps;
        for (const Decimal& step : n.multiple_of)
            if ((n.types & json_type::kNumber) != json_type::kInteger || !divides_one(step)) steps.push_back(step);
        if (steps.empty()) return number_value(rest);
        Dfa dfa = regular_dfa(g_, number_value(rest));
        for (const Decimal& step : steps) dfa = dfa_product(dfa, multiple_of_dfa(step), DfaProduct::kIntersection);
        return g_.automaton(std::move(dfa));
    }
    uint8_t t = n.types & json_type::kNumber;
    NumberConstraints c = n.numbers;
    c.integer = t == json_type::kInteger;
    c.plain_integers = dialect_.integer_excludes_zero_fraction;
    if (t != json_type::kFraction) return number_grammar(g_, c);
    // Numbers with a non-zero fraction digit, no exponent (integrality of 1.5e1 is not regular).
    ExprId digit = g_.bytes(ByteSet::range('0', '9'));
    ExprId fraction_only = g_.seq({g_.optional(g_.byte('-')), g_.alt({g_.byte('0'), g_.seq({g_.bytes(ByteSet::range('1', '9')), g_.star(digit)})}),
                                   g_.byte('.'), g_.star(digit), g_.bytes(ByteSet::range('1', '9')), g_.star(digit)});
    if (c.lower.empty() && c.upper.empty()) return fraction_only;
    Dfa both = dfa_product(regular_dfa(g_, fraction_only), regular_dfa(g_, number_grammar(g_, c)), DfaProduct::kIntersection);
    return g_.automaton(std::move(both));
}

ExprId SchemaCompiler::compile_types(const SchemaNode& n, int depth) {
    std::vector<ExprId> alts;
    if (n.types & json_type::kNull) alts.push_back(g_.literal("null"));
    if (n.types & json_type::kBoolean) alts.push_back(g_.alt({g_.literal("true"), g_.literal("false")}));
    if (n.types & json_type::kNumber) alts.push_back(number_value(n));
    if (n.types & json_type::kString) alts.push_back(string_value(n));
    if (n.types & json_type::kArray) alts.push_back(array_value(n, depth));
    if (n.types & json_type::kObject) alts.push_back(object_value(n, depth));
    return g_.alt(alts);
}

ExprId add_json_schema(Grammar& g, std::string_view schema_text, const JsonSchemaOptions& options, const std::string& rule_prefix,
                       FormatCache* formats) {
    Json schema;
    try {
        schema = Json::parse(schema_text);
    } catch (const nlohmann::json::exception& e) {
        grammar_fail("schema is not valid JSON: {}", e.what());
    }
    SchemaDocument doc(schema);
    return SchemaCompiler(g, doc, options, SchemaDialect::of_root(schema), rule_prefix, formats).compile_root();
}

}  // namespace deepinfer::grammar
