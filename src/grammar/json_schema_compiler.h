#pragma once
// Internal to the JSON Schema front-end: turns parsed schema nodes into grammar expressions.
// json_schema.cc holds the dispatch (references, combinators, enums, types); json_values.cc the
// shapes of JSON values (objects, arrays, strings, literals, whitespace).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "grammar/dfa.h"
#include "grammar/encoding.h"
#include "grammar/grammar_ir.h"
#include "grammar/json_formats.h"
#include "grammar/regex.h"
#include "grammar/json_schema_node.h"
#include "grammar/json_schema_options.h"
#include "grammar/json_schema_refs.h"

namespace deepinfer::grammar {

class SchemaCompiler {
public:
    SchemaCompiler(Grammar& g, const SchemaDocument& doc, const JsonSchemaOptions& options, SchemaDialect dialect,
                   std::string prefix, FormatCache* formats)
        : g_(g), doc_(doc), options_(options), dialect_(dialect), parser_(doc, options_, dialect), prefix_(std::move(prefix)),
          formats_(formats) {}

    ExprId compile_root() { return ref_rule(doc_.root()); }

private:
    // json_schema.cc
    ExprId compile(SchemaNode n, int depth);
    ExprId compile_conj(const SchemaConj& conj, int depth);
    ExprId ref_rule(const SchemaRef& target);
    ExprId alternatives(const SchemaNode& base, const std::vector<SchemaRef>& group, bool exclusive, int depth);
    void check_exclusive(const std::vector<SchemaNode>& nodes, const std::vector<ExprId>& exprs);
    bool discriminated(const SchemaNode& a, const SchemaNode& b);
    void apply_not(SchemaNode& n);
    ExprId compile_enum(const SchemaNode& n);
    bool value_allowed(const SchemaNode& n, const Json& v);
    ExprId compile_types(const SchemaNode& n, int depth);
    ExprId number_value(const SchemaNode& n);

    // json_values.cc
    ExprId ws();
    ExprId separator();
    ExprId json_char();
    ExprId any_value();
    ExprId any_string();
    ExprId string_value(const SchemaNode& n);
    Dfa string_content_dfa(const SchemaNode& n);
    std::shared_ptr<const Dfa> format_dfa(const std::string& format);
    ExprId array_value(const SchemaNode& n, int depth);
    ExprId object_value(const SchemaNode& n, int depth);
    ExprId extra_member(const SchemaNode& n, const std::vector<std::string>& declared, const Dfa* key_filter, int depth);
    Dfa property_name_filter(const SchemaNode& n);
    SchemaConj matching_patterns(const SchemaNode& n, const std::string& name);
    Regex parse_pattern(const std::string& pattern);
    ExprId literal_value(const Json& v);
    ExprId quoted_key(const std::string& name, CharEncoding encoding = CharEncoding::kJsonMinimal);

    Grammar& g_;
    const SchemaDocument& doc_;
    JsonSchemaOptions options_;
    SchemaDialect dialect_;
    SchemaParser parser_;
    std::string prefix_;
    std::map<const Json*, int32_t> ref_rules_;
    std::map<std::string, ExprId> string_values_;  // by constraints
    FormatCache* formats_;
    std::optional<Dfa> json_char_dfa_;
    int32_t any_rule_ = -1;
    ExprId ws_ = -1, json_char_ = -1, any_string_ = -1;
    int32_t num_extra_rules_ = 0;
    ExprId any_key_ = -1;
    std::optional<Dfa> any_key_dfa_;
};

}  // namespace deepinfer::grammar
