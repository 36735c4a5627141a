#include <algorithm>

#include "grammar/dfa.h"
#include "grammar/encoding.h"
#include "grammar/grammar_error.h"
#include "grammar/json_formats.h"
#include "grammar/json_keys.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/pda.h"
#include "grammar/regex.h"

namespace deepinfer::grammar {

// Whitespace between tokens. Flexible whitespace is one small rule entered by calls, so its bounded
// run is not expanded again at every position of the grammar.
ExprId SchemaCompiler::ws() {
    if (ws_ < 0) {
        if (options_.whitespace == JsonWhitespace::kCompact) {
            ws_ = g_.empty();
        } else {
            ByteSet space = ByteSet::of(' ');
            for (char c : {'\t', '\n', '\r'}) space.add(static_cast<uint8_t>(c));
            int32_t rule = g_.add_rule(prefix_ + "ws");
            g_.set_rule_inlinable(rule, false);
            g_.set_rule_body(rule, g_.repeat(g_.bytes(space), 0, options_.max_whitespace));
            ws_ = g_.rule_ref(rule);
        }
    }
    return ws_;
}

ExprId SchemaCompiler::separator() { return g_.seq({ws(), g_.byte(','), ws()}); }

ExprId SchemaCompiler::json_char() {
    if (json_char_ < 0) json_char_ = encode_class(g_, CodepointSet::all(), CharEncoding::kJsonString);
    return json_char_;
}

ExprId SchemaCompiler::any_string() {
    if (any_string_ < 0) any_string_ = g_.seq({g_.byte('"'), g_.star(json_char()), g_.byte('"')});
    return any_string_;
}

// Any JSON value: one recursive rule shared by every place a schema leaves values open.
ExprId SchemaCompiler::any_value() {
    if (any_rule_ >= 0) return g_.rule_ref(any_rule_);
    any_rule_ = g_.add_rule(prefix_ + "any");
    ExprId value = g_.rule_ref(any_rule_);
    ExprId member = g_.seq({any_string(), ws(), g_.byte(':'), ws(), value});
    auto list = [&](ExprId item) { return g_.optional(g_.seq({item, g_.star(g_.seq({separator(), item}))})); };
    NumberConstraints unbounded;
    g_.set_rule_body(any_rule_, g_.alt({g_.seq({g_.byte('{'), ws(), list(member), ws(), g_.byte('}')}),
                                        g_.seq({g_.byte('['), ws(), list(value), ws(), g_.byte(']')}), any_string(),
                                        number_grammar(g_, unbounded), g_.literal("true"), g_.literal("false"),
                                        g_.literal("null")}));
    return value;
}

std::shared_ptr<const Dfa> SchemaCompiler::format_dfa(const std::string& format) {
    if (formats_) return formats_->get(format);
    auto expr = format_grammar(g_, format);
    return expr ? std::make_shared<const Dfa>(regular_dfa(g_, *expr)) : nullptr;
}

// The content of a constrained string: length bounds, patterns and formats, intersected.
Dfa SchemaCompiler::string_content_dfa(const SchemaNode& n) {
    std::vector<Dfa> parts;
    // Counted characters are spelled canonically (escapes only where JSON needs them): the count
    // multiplies the character automaton, which is much smaller that way.
    if (!json_char_dfa_) json_char_dfa_ = regular_dfa(g_, encode_class(g_, CodepointSet::all(), CharEncoding::kJsonMinimal));
    if (n.min_length > 0 || n.max_length >= 0) {
        if (n.min_length > Dfa::kMaxStates || n.max_length > Dfa::kMaxStates)
            grammar_fail("grammar too large: string length bound above {}", Dfa::kMaxStates);
        parts.push_back(dfa_repeat(*json_char_dfa_, static_cast<int32_t>(n.min_length), static_cast<int32_t>(n.max_length)));
    }
    for (const std::string& p : n.patterns)
        parts.push_back(regular_dfa(g_, lower_regex(g_, parse_pattern(p), CharEncoding::kJsonString, RegexMatch::kSearch)));
    for (const std::string& f : n.formats) {
        auto dfa = format_dfa(f);
        if (!dfa) grammar_fail("unsupported format '{}'", f);
        parts.push_back(*dfa);
    }
    if (parts.empty()) return regular_dfa(g_, g_.star(json_char()));
    Dfa dfa = std::move(parts[0]);
    for (size_t i = 1; i < parts.size(); ++i) dfa = dfa_product(dfa, parts[i], DfaProduct::kIntersection);
    return dfa;
}

// A string value. Constrained ones become one automaton with their quotes; a large one becomes a
// rule of its own, entered by calls, shared by every place with the same constraints.
ExprId SchemaCompiler::string_value(const SchemaNode& n) {
    constexpr int32_t kInlineStates = 48;
    if (n.min_length == 0 && n.max_length < 0 && n.patterns.empty() && n.formats.empty())
        return any_string();
    std::string key = std::to_string(n.min_length) + "," + std::to_string(n.max_length);
    for (const auto& p : n.patterns) key += "|p" + p;
    for (const auto& f : n.formats) key += "|f" + f;
    auto it = string_values_.find(key);
    if (it != string_values_.end()) return it->second;
    Dfa content = string_content_dfa(n);
    auto quoted = dfa_enclose(content, '"', '"');
    ExprId value;
    if (!quoted) {
        value = g_.seq({g_.byte('"'), g_.automaton(std::move(content)), g_.byte('"')});
    } else if (quoted->num_states() <= kInlineStates) {
        value = g_.automaton(std::move(*quoted));
    } else {
        int32_t rule = g_.add_rule(prefix_ + "string" + std::to_string(string_values_.size()));
        g_.set_rule_inlinable(rule, false);
        g_.set_rule_body(rule, g_.automaton(std::move(*quoted)));
        value = g_.rule_ref(rule);
    }
    string_values_.emplace(key, value);
    return value;
}

ExprId SchemaCompiler::array_value(const SchemaNode& n, int depth) {
    constexpr int64_t kMaxCount = 100000;
    int64_t min = n.min_items, max = n.max_items;
    int64_t k = static_cast<int64_t>(n.prefix_items.size());
    if (n.items_forbidden) max = max < 0 ? k : std::min(max, k);
    if (max >= 0 && max < k) k = max;
    if (max >= 0 && min > max) return g_.nothing();
    if (min > kMaxCount || max > kMaxCount) grammar_fail("array length bounds above {} are not supported", kMaxCount);
    ExprId sep = separator();
    std::vector<ExprId> prefix;
    for (int64_t i = 0; i < k; ++i) prefix.push_back(compile_conj(n.prefix_items[i], depth));
    bool open_tail = !n.items_forbidden && (max < 0 || max > k);
    ExprId item = open_tail ? compile_conj(n.items, depth) : g_.nothing();
    // What may follow once `count` elements are written (count >= 1).
    auto rest_after = [&](int64_t count) {
        int64_t lo = std::max<int64_t>(min - count, 0);
        int32_t hi = max < 0 ? Grammar::kUnbounded : static_cast<int32_t>(max - count);
        return open_tail ? g_.repeat(g_.seq({sep, item}), static_cast<int32_t>(lo), hi) : g_.empty();
    };
    ExprId tail = rest_after(k);
    for (int64_t i = k - 1; i >= 1; --i) {
        ExprId more = g_.seq({sep, prefix[i], tail});
        tail = i >= min ? g_.optional(more) : more;
    }
    ExprId first = k > 0 ? g_.seq({prefix[0], tail}) : open_tail ? g_.seq({item, rest_after(1)}) : g_.nothing();
    ExprId content = min == 0 ? g_.optional(first) : first;
    return g_.seq({g_.byte('['), ws(), content, ws(), g_.byte(']')});
}

// Declared names and string constants are generated in their one canonical spelling (escapes only
// where JSON requires them); other spellings of the same string are blocked, never misread.
ExprId SchemaCompiler::quoted_key(const std::string& name, CharEncoding encoding) {
    return g_.seq({g_.byte('"'), encode_string(g_, name, encoding), g_.byte('"')});
}

// The patternProperties whose pattern matches `name` (search semantics, on the decoded name).
SchemaConj SchemaCompiler::matching_patterns(const SchemaNode& n, const std::string& name) {
    SchemaConj out;
    for (const PropertySchema& p : n.pattern_properties) {
        Dfa dfa = regular_dfa(g_, lower_regex(g_, parse_pattern(p.name), CharEncoding::kUtf8, RegexMatch::kSearch));
        if (dfa.matches(name)) out.insert(out.end(), p.schemas.begin(), p.schemas.end());
    }
    return out;
}

Regex SchemaCompiler::parse_pattern(const std::string& pattern) {
    try {
        return parse_regex(pattern);
    } catch (const GrammarError& e) {
        grammar_fail("in pattern '{}': {}", pattern, e.what());
    }
}

// Members whose key is none of the declared names: one alternative per set of patternProperties a
// key can match exactly (none of them: additionalProperties). A rule of its own, entered by calls,
// so the object grammar repeats a call rather than the key automata at every position. Extra keys
// are spelled canonically like declared ones: a declared name in another spelling can then never
// pass as an extra key.
ExprId SchemaCompiler::extra_member(const SchemaNode& n, const std::vector<std::string>& declared, const Dfa* key_filter,
                                    int depth) {
    constexpr size_t kMaxPatterns = 4;
    if (n.pattern_properties.size() > kMaxPatterns)
        grammar_fail("more than {} patternProperties are not supported", kMaxPatterns);
    if (any_key_ < 0) {
        ExprId key_char = encode_class(g_, CodepointSet::all(), CharEncoding::kJsonMinimal);
        any_key_ = g_.seq({g_.byte('"'), g_.star(key_char), g_.byte('"')});
    }
    if (!json_char_dfa_) json_char_dfa_ = regular_dfa(g_, encode_class(g_, CodepointSet::all(), CharEncoding::kJsonMinimal));
    std::optional<Dfa> direct = keys_except(*json_char_dfa_, declared);
    Dfa keys = direct ? std::move(*direct) : Dfa{};
    if (!direct) {
        if (!any_key_dfa_) any_key_dfa_ = regular_dfa(g_, any_key_);
        std::vector<ExprId> names;
        for (const std::string& name : declared) names.push_back(quoted_key(name));
        keys = dfa_product(*any_key_dfa_, regular_dfa(g_, g_.alt(names)), DfaProduct::kDifference);
    }
    if (key_filter) keys = dfa_product(keys, *key_filter, DfaProduct::kIntersection);
    std::vector<Dfa> patterns;
    for (const PropertySchema& p : n.pattern_properties) {
        ExprId body = lower_regex(g_, parse_pattern(p.name), CharEncoding::kJsonMinimal, RegexMatch::kSearch);
        patterns.push_back(regular_dfa(g_, g_.seq({g_.byte('"'), body, g_.byte('"')})));
    }
    std::vector<ExprId> members;
    for (uint32_t subset = 0; subset < (1u << patterns.size()); ++subset) {
        if (subset == 0 && n.additional_forbidden) continue;
        Dfa key = keys;
        SchemaConj schemas = subset == 0 ? n.additional : SchemaConj{};
        for (size_t i = 0; i < patterns.size(); ++i) {
            bool in = (subset >> i) & 1;
            key = dfa_product(key, patterns[i], in ? DfaProduct::kIntersection : DfaProduct::kDifference);
            if (in) schemas.insert(schemas.end(), n.pattern_properties[i].schemas.begin(), n.pattern_properties[i].schemas.end());
        }
        if (key.language_is_empty()) continue;
        members.push_back(g_.seq({g_.automaton(std::move(key)), ws(), g_.byte(':'), ws(), compile_conj(schemas, depth)}));
    }
    if (members.empty()) return g_.nothing();
    int32_t rule = g_.add_rule(prefix_ + "extra" + std::to_string(num_extra_rules_++));
    g_.set_rule_inlinable(rule, false);
    g_.set_rule_body(rule, g_.alt(members));
    return g_.rule_ref(rule);
}

// The quoted keys propertyNames allows; only string constraints (lengths, pattern, format, enum,
// const) can be applied to keys.
Dfa SchemaCompiler::property_name_filter(const SchemaNode& n) {
    SchemaNode names;
    parser_.merge_into(names, parser_.parse_conj(n.property_names));
    if (!(names.types & json_type::kString)) return Dfa{};  // no key at all
    SchemaNode rest = names;
    rest.types = json_type::kAll;
    rest.min_length = 0, rest.max_length = -1;
    rest.patterns.clear(), rest.formats.clear();
    rest.allowed_values.reset();
    if (!only_types(rest)) grammar_fail("unsupported JSON Schema keyword 'propertyNames' (only string constraints are supported)");
    Dfa content = string_content_dfa(names);
    if (names.allowed_values) {
        std::vector<ExprId> values;
        for (const Json& v : *names.allowed_values)
            if (v.is_string()) values.push_back(encode_string(g_, v.get<std::string>(), CharEncoding::kJsonMinimal));
        content = dfa_product(content, regular_dfa(g_, g_.alt(values)), DfaProduct::kIntersection);
    }
    if (content.language_is_empty()) return Dfa{};
    auto quoted = dfa_enclose(content, '"', '"');
    return quoted ? *quoted : regular_dfa(g_, g_.seq({g_.byte('"'), g_.automaton(std::move(content)), g_.byte('"')}));
}

ExprId SchemaCompiler::object_value(const SchemaNode& n, int depth) {
    std::optional<Dfa> key_filter;
    if (!n.property_names.empty()) key_filter = property_name_filter(n);
    std::vector<PropertySchema> props = n.properties;
    for (const std::string& name : n.required)
        if (!n.property(name)) {
            SchemaConj patterned = matching_patterns(n, name);
            if (patterned.empty() && n.additional_forbidden) return g_.nothing();
 
            props.push_back({name, patterned.empty() ? n.additional : patterned});
        }
    for (PropertySchema& p : props) {
        if (!n.property(p.name)) continue;
        SchemaConj patterned = matching_patterns(n, p.name);
        p.schemas.insert(p.schemas.end(), patterned.begin(), patterned.end());
    }
    if (options_.property_order == JsonPropertyOrder::kSorted)
        std::sort(props.begin(), props.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    std::vector<std::string> declared;
    std::vector<ExprId> members;
    std::vector<bool> required;
    for (const PropertySchema& p : props) {
        declared.push_back(p.name);
        bool is_required = n.required.count(p.name) > 0;
        if (key_filter && !key_filter->matches(std::string(1, '"').append(json_canonical_content(p.name)).append(1, '"'))) {
            if (is_required) return g_.nothing();  // a required name propertyNames forbids
            continue;
        }
        ExprId value = compile_conj(p.schemas, depth);
        if (g_.node(value).kind == ExprKind::kNothing) {
            if (is_required) return g_.nothing();
            continue;
        }
        members.push_back(g_.seq({quoted_key(p.name), ws(), g_.byte(':'), ws(), value}));
        required.push_back(is_required);
    }
    ExprId sep = separator();
    ExprId extra = extra_member(n, declared, key_filter ? &*key_filter : nullptr, depth);
    ExprId extras = g_.star(g_.seq({sep, extra}));
    // after[i]: the rest once something is written and properties before i are settled.
    size_t count = members.size();
    std::vector<ExprId> after(count + 1);
    after[count] = extras;
    for (size_t i = count; i-- > 0;) {
        ExprId member = g_.seq({sep, members[i]});
        after[i] = g_.seq({extras, required[i] ? member : g_.optional(member), after[i + 1]});
    }
    std::vector<ExprId> firsts{g_.seq({extra, after[0]})};
    bool all_optional = true;
    for (size_t k = 0; k < count && all_optional; ++k) {
        firsts.push_back(g_.seq({members[k], after[k + 1]}));
        all_optional = !required[k];
    }
    ExprId content = all_optional ? g_.optional(g_.alt(firsts)) : g_.alt(firsts);
    return g_.seq({g_.byte('{'), ws(), content, ws(), g_.byte('}')});
}

ExprId SchemaCompiler::literal_value(const Json& v) {
    if (v.is_null()) return g_.literal("null");
    if (v.is_boolean()) return g_.literal(v.get<bool>() ? "true" : "false");
    if (v.is_number()) {
        auto d = parse_decimal(v.dump());
        if (!d) grammar_fail("number {} out of the supported range", v.dump());
        return number_equal_to(g_, *d);
    }
    if (v.is_string()) return quoted_key(v.get<std::string>());
    std::vector<ExprId> parts;
    if (v.is_array()) {
        for (const Json& item : v) {
            if (!parts.empty()) parts.push_back(separator());
            parts.push_back(literal_value(item));
        }
        return g_.seq({g_.byte('['), ws(), g_.seq(parts), ws(), g_.byte(']')});
    }
    std::vector<std::pair<std::string, const Json*>> members;
    for (const auto& [key, value] : v.items()) members.emplace_back(key, &value);
    if (options_.property_order == JsonPropertyOrder::kSorted) std::sort(members.begin(), members.end());
    for (const auto& [key, value] : members) {
        if (!parts.empty()) parts.push_back(separator());
        parts.push_back(g_.seq({quoted_key(key), ws(), g_.byte(':'), ws(), literal_value(*value)}));
    }
    return g_.seq({g_.byte('{'), ws(), g_.seq(parts), ws(), g_.byte('}')});
}

}  // namespace deepinfer::grammar
