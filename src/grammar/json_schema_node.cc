#include "grammar/json_schema_node.h"

#include <algorithm>

#include "grammar/grammar_error.h"

namespace deepinfer::grammar {

namespace {

// Keywords that constrain values; a $ref next to any of them is merged with its target.
bool is_validation_keyword(const std::string& key) {
    static const std::set<std::string> kKeys = {
        "type", "enum", "const", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "items", "prefixItems", "additionalItems", "minItems",
        "maxItems", "uniqueItems", "properties", "required", "additionalProperties", "allOf", "anyOf", "oneOf", "not"};
    return kKeys.count(key) > 0;
}

// The published drafts; a custom meta-schema may switch vocabularies off, which the compiler
// cannot know.
bool is_known_dialect(const std::string& uri) {
    std::string u = uri;
    if (!u.empty() && u.back() == '#') u.pop_back();
    if (u.rfind("https://", 0) == 0) u.replace(0, 8, "http://");
    static const std::set<std::string> kKnown = {
        "http://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft/2019-09/schema",
        "http://json-schema.org/draft-07/schema",      "http://json-schema.org/draft-06/schema",
        "http://json-schema.org/draft-04/schema",      "http://json-schema.org/schema"};
    return kKnown.count(u) > 0;
}

int64_t count_value(const std::string& key, const Json& v) {
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() != static_cast<double>(static_cast<int64_t>(v.get<double>())))
        grammar_fail("'{}' must be a non-negative integer", key);
    return static_cast<int64_t>(v.get<double>());
}

Decimal decimal_value(const std::string& key, const Json& v) {
    auto d = v.is_number() ? parse_decimal(v.dump()) : std::nullopt;
    if (!d) grammar_fail("'{}' must be a number", key);
    return *d;
}

bool json_contains(const std::vector<Json>& values, const Json& v) {
    return std::find(values.begin(), values.end(), v) != values.end();
}

}  // namespace

SchemaDialect SchemaDialect::of_root(const Json& root) {
    SchemaDialect d;
    if (!root.is_object() || !root.contains("$schema") || !root["$schema"].is_string()) return d;
    std::string uri = root["$schema"].get<std::string>();
    auto is = [&](const char* draft) { return uri.find(draft) != std::string::npos; };
    d.ref_overrides_siblings = is("draft-03") || is("draft-04") || is("draft-06") || is("draft-07");
    d.integer_excludes_zero_fraction = is("draft-03") || is("draft-04");
    return d;
}

bool only_types(const SchemaNode& n) {
    SchemaNode plain;
    plain.types = n.types;
    return !n.allowed_values && n.min_length == 0 && n.max_length < 0 && n.patterns.empty() && n.formats.empty() &&
           n.numbers.lower.empty() && n.numbers.upper.empty() && n.multiple_of.empty() && n.prefix_items.empty() &&
           n.items.empty() && !n.items_forbidden && n.min_items == 0 && n.max_items < 0 && n.properties.empty() &&
           n.required.empty() && n.pattern_properties.empty() && n.property_names.empty() && n.additional.empty() && !n.additional_forbidden && n.any_of.empty() &&
           n.one_of.empty() && n.negated.empty() && !n.reference;
}

const PropertySchema* SchemaNode::property(const std::string& name) const {
    for (const auto& p : properties)
        if (p.name == name) return &p;
    return nullptr;
}

void check_keyword_support(const std::string& key, const Json& value, const Json& schema) {
    static const std::set<std::string> kRefused = {
        "contains", "dependentRequired", "dependentSchemas", "dependencies", "if", "$dynamicRef",
        "$recursiveRef", "$recursiveAnchor", "maxProperties"};
    bool refused = kRefused.count(key) > 0;
    if (key == "uniqueItems") refused = value.is_boolean() && value.get<bool>();
    if (key == "unevaluatedProperties" || key == "unevaluatedItems") refused = !(value.is_boolean() && value.get<bool>());
    if (key == "minProperties") refused = !(value.is_number() && value.get<double>() <= 0);
    if (refused) grammar_fail("unsupported JSON Schema keyword '{}'", key);
    if (key == "$schema" && value.is_string() && !is_known_dialect(value.get<std::string>()))
        grammar_fail("unsupported $schema '{}' (its vocabularies are unknown)", value.get<std::string>());
}

SchemaNode SchemaParser::parse(const SchemaRef& ref) {
    const Json& s = *ref.schema;
    SchemaNode n;
    if (s.is_boolean()) {
        if (!s.get<bool>()) n.types = 0;
        return n;
    }
    if (!s.is_object()) grammar_fail("a schema must be an object or a boolean");
    for (const auto& [key, value] : s.items()) check_keyword_support(key, value, s);
    auto ref_it = s.find("$ref");
    if (ref_it != s.end()) {
        if (!ref_it->is_string()) grammar_fail("'$ref' must be a string");
        SchemaRef target = doc_.resolve(ref_it->get<std::string>(), ref.base);
        bool siblings = !dialect_.ref_overrides_siblings && std::any_of(s.items().begin(), s.items().end(), [](const auto& kv) { return is_validation_keyword(kv.key()); });
        if (!siblings) {
            n.reference = target;
            return n;
        }
        if (++ref_depth_ > 32) grammar_fail("$ref recursion through a schema with sibling keywords is not supported");
        n = parse(target);
        --ref_depth_;
    }
    SchemaNode own;
    parse_keywords(s, ref.base, own);
    merge_into(n, std::move(own));
    return n;
}

SchemaNode SchemaParser::parse_conj(const SchemaConj& conj) {
    if (conj.size() == 1) return parse(conj[0]);
    SchemaNode n;
    for (const SchemaRef& r : conj) merge_into(n, parse(r));
    return n;
}

void SchemaParser::parse_keywords(const Json& s, const std::string& base, SchemaNode& n) {
    auto sub = [&](const Json& j) { return SchemaRef{&j, doc_.base_of(&j, base)}; };
    if (auto t = s.find("type"); t != s.end()) {
        uint8_t types = 0;
        for (const Json& name : t->is_array() ? *t : Json::array({*t})) {
            std::string tn = name.is_string() ? name.get<std::string>() : "";
            uint8_t bit = tn == "null" ? json_type::kNull : tn == "boolean" ? json_type::kBoolean : tn == "integer" ? json_type::kInteger
                          : tn == "number" ? json_type::kNumber : tn == "string" ? json_type::kString : tn == "array" ? json_type::kArray
                          : tn == "object" ? json_type::kObject : 0;
            if (!bit) grammar_fail("unknown type '{}'", name.dump());
            types |= bit;
        }
        n.types &= types;
    }
    if (auto e = s.find("enum"); e != s.end()) {
        if (!e->is_array()) grammar_fail("'enum' must be an array");
        n.allowed_values = std::vector<Json>(e->begin(), e->end());
    }
    if (auto c = s.find("const"); c != s.end()) {
        std::vector<Json> values{*c};
        if (n.allowed_values && !json_contains(*n.allowed_values, *c)) values.clear();
        n.allowed_values = values;
    }
    if (auto v = s.find("minLength"); v != s.end()) n.min_length = count_value("minLength", *v);
    if (auto v = s.find("maxLength"); v != s.end()) n.max_length = count_value("maxLength", *v);
    if (auto v = s.find("pattern"); v != s.end()) {
        if (!v->is_string()) grammar_fail("'pattern' must be a string");
        n.patterns.push_back(v->get<std::string>());
    }
    if (auto v = s.find("format"); v != s.end() && options_.formats == JsonFormats::kAssert) {
        if (!v->is_string()) grammar_fail("'format' must be a string");
        n.formats.push_back(v->get<std::string>());
    }
    parse_number_keywords(s, n);
    parse_array_keywords(s, base, n);
    parse_object_keywords(s, base, n);
    if (auto v = s.find("allOf"); v != s.end()) {
        if (!v->is_array() || v->empty()) grammar_fail("'allOf' must be a non-empty array");
        for (const Json& part : *v) merge_into(n, parse(sub(part)));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
        auto v = s.find(key);
        if (v == s.end()) continue;
        if (!v->is_array() || v->empty()) grammar_fail("'{}' must be a non-empty array", key);
        std::vector<SchemaRef> group;
        for (const Json& part : *v) group.push_back(sub(part));
        (std::string(key) == "anyOf" ? n.any_of : n.one_of).push_back(std::move(group));
    }
    if (auto v = s.find("not"); v != s.end()) n.negated.push_back(sub(*v));
}

void SchemaParser::parse_number_keywords(const Json& s, SchemaNode& n) {
    auto bound = [&](const char* key, bool lower, bool exclusive) {
        auto v = s.find(key);
        if (v == s.end() || v->is_boolean()) return;
        (lower ? n.numbers.lower : n.numbers.upper).push_back({decimal_value(key, *v), exclusive});
    };
    // Draft 4 spelled exclusive bounds as booleans next to minimum / maximum.
    auto flag = [&](const char* key) { auto v = s.find(key); return v != s.end() && v->is_boolean() && v->get<bool>(); };
    bound("minimum", true, flag("exclusiveMinimum"));
    bound("maximum", false, flag("exclusiveMaximum"));
    bound("exclusiveMinimum", true, true);
    bound("exclusiveMaximum", false, true);
    if (auto v = s.find("multipleOf"); v != s.end()) n.multiple_of.push_back(decimal_value("multipleOf", *v));
}

void SchemaParser::parse_array_keywords(const Json& s, const std::string& base, SchemaNode& n) {
    auto sub = [&](const Json& j) { return SchemaRef{&j, doc_.base_of(&j, base)}; };
    auto set_rest = [&](const Json& schema) {
        if (schema.is_boolean() && !schema.get<bool>()) n.items_forbidden = true;
        else n.items.push_back(sub(schema));
    };
    auto prefix = s.find("prefixItems");
    if (prefix != s.end()) {
        if (!prefix->is_array()) grammar_fail("'prefixItems' must be an array");
        for (const Json& p : *prefix) n.prefix_items.push_back({sub(p)});
    }
    if (auto items = s.find("items"); items != s.end()) {
        if (items->is_array()) {  // draft 7 tuple form: items + additionalItems
            if (prefix != s.end()) grammar_fail("'items' must be a schema when 'prefixItems' is present");
            for (const Json& p : *items) n.prefix_items.push_back({sub(p)});
            if (auto extra = s.find("additionalItems"); extra != s.end()) set_rest(*extra);
        } else {
            set_rest(*items);
        }
    }
    if (auto v = s.find("minItems"); v != s.end()) n.min_items = count_value("minItems", *v);
    if (auto v = s.find("maxItems"); v != s.end()) n.max_items = count_value("maxItems", *v);
}

void SchemaParser::parse_object_keywords(const Json& s, const std::string& base, SchemaNode& n) {
    auto sub = [&](const Json& j) { return SchemaRef{&j, doc_.base_of(&j, base)}; };
    if (auto props = s.find("properties"); props != s.end()) {
        if (!props->is_object()) grammar_fail("'properties' must be an object");
        for (const auto& [name, schema] : props->items()) n.properties.push_back({name, {sub(schema)}});
    }
    if (auto req = s.find("required"); req != s.end()) {
        if (!req->is_array()) grammar_fail("'required' must be an array");
        for (const Json& name : *req) {
            if (!name.is_string()) grammar_fail("'required' must list strings");
            n.required.insert(name.get<std::string>());
        }
    }
    if (auto patterns = s.find("patternProperties"); patterns != s.end()) {
        if (!patterns->is_object()) grammar_fail("'patternProperties' must be an object");
        for (const auto& [pattern, schema] : patterns->items()) n.pattern_properties.push_back({pattern, {sub(schema)}});
    }
    if (auto names = s.find("propertyNames"); names != s.end()) n.property_names.push_back(sub(*names));
    if (auto extra = s.find("additionalProperties"); extra != s.end()) {
        if (extra->is_boolean() && !extra->get<bool>()) n.additional_forbidden = true;
        else n.additional.push_back(sub(*extra));
    }
}

namespace {

const Json kFalseSchema = false;
const SchemaRef kNever{&kFalseSchema, ""};

// Arrays: position by position; past a node's prefix its `items` schema applies.
void merge_arrays(SchemaNode& a, const SchemaNode& b) {
    auto at = [](const SchemaNode& n, size_t i) {
        if (i < n.prefix_items.size()) return n.prefix_items[i];
        return n.items_forbidden ? SchemaConj{kNever} : n.items;
    };
    std::vector<SchemaConj> prefix(std::max(a.prefix_items.size(), b.prefix_items.size()));
    for (size_t i = 0; i < prefix.size(); ++i) {
        prefix[i] = at(a, i);
        SchemaConj other = at(b, i);
        prefix[i].insert(prefix[i].end(), other.begin(), other.end());
    }
    a.prefix_items = std::move(prefix);
    a.items.insert(a.items.end(), b.items.begin(), b.items.end());
    a.items_forbidden = a.items_forbidden || b.items_forbidden;
    a.min_items = std::max(a.min_items, b.min_items);
    if (b.max_items >= 0) a.max_items = a.max_items < 0 ? b.max_items : std::min(a.max_items, b.max_items);
}

// Objects: a property one side does not declare must satisfy that side's additionalProperties
// (or its matching patternProperties, which this merge does not work out, so it refuses).
void merge_objects(SchemaNode& a, const SchemaNode& b) {
    if ((!a.pattern_properties.empty() || !b.pattern_properties.empty()) && a.constrains_keys() && b.constrains_keys())
        grammar_fail("unsupported JSON Schema keyword 'patternProperties' (next to other property keywords through allOf or $ref)");
    a.pattern_properties.insert(a.pattern_properties.end(), b.pattern_properties.begin(), b.pattern_properties.end());
    a.property_names.insert(a.property_names.end(), b.property_names.begin(), b.property_names.end());
    for (PropertySchema& p : a.properties) {
        const PropertySchema* q = b.property(p.name);
        const SchemaConj extra = q ? q->schemas : b.additional_forbidden ? SchemaConj{kNever} : b.additional;
        p.schemas.insert(p.schemas.end(), extra.begin(), extra.end());
    }
    for (const PropertySchema& q : b.properties) {
        if (a.property(q.name)) continue;
        PropertySchema p = q;
        const SchemaConj extra = a.additional_forbidden ? SchemaConj{kNever} : a.additional;
        p.schemas.insert(p.schemas.end(), extra.begin(), extra.end());
        a.properties.push_back(std::move(p));
    }
    a.additional.insert(a.additional.end(), b.additional.begin(), b.additional.end());
    a.additional_forbidden = a.additional_forbidden || b.additional_forbidden;
    a.required.insert(b.required.begin(), b.required.end());
}

}  // namespace

void SchemaParser::merge_into(SchemaNode& a, SchemaNode b) {
    // A bare $ref meeting other constraints is expanded; the depth guard stops endless recursion.
    for (SchemaNode* n : {&a, &b}) {
        if (!n->reference) continue;
        if (++ref_depth_ > 32) grammar_fail("$ref recursion through a schema with sibling keywords is not supported");
        SchemaRef target = *n->reference;
        *n = parse(target);
        --ref_depth_;
    }
    a.types &= b.types;
    if (b.allowed_values) {
        if (!a.allowed_values) {
            a.allowed_values = std::move(b.allowed_values);
        } else {
            std::vector<Json> both;
            for (const Json& v : *a.allowed_values)
                if (json_contains(*b.allowed_values, v)) both.push_back(v);
            a.allowed_values = std::move(both);
        }
    }
    a.min_length = std::max(a.min_length, b.min_length);
    if (b.max_length >= 0) a.max_length = a.max_length < 0 ? b.max_length : std::min(a.max_length, b.max_length);
    a.patterns.insert(a.patterns.end(), b.patterns.begin(), b.patterns.end());
    a.formats.insert(a.formats.end(), b.formats.begin(), b.formats.end());
    a.numbers.lower.insert(a.numbers.lower.end(), b.numbers.lower.begin(), b.numbers.lower.end());
    a.numbers.upper.insert(a.numbers.upper.end(), b.numbers.upper.begin(), b.numbers.upper.end());
    a.multiple_of.insert(a.multiple_of.end(), b.multiple_of.begin(), b.multiple_of.end());
    merge_arrays(a, b);
    merge_objects(a, b);
    for (auto& g : b.any_of) a.any_of.push_back(std::move(g));
    for (auto& g : b.one_of) a.one_of.push_back(std::move(g));
    a.negated.insert(a.negated.end(), b.negated.begin(), b.negated.end());
}

}  // namespace deepinfer::grammar
