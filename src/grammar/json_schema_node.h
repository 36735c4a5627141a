#pragma once
// A JSON Schema object reduced to the constraints the grammar compiler understands. allOf, $ref
// with sibling keywords and the schemas that apply to one property are merged into one node
// (constraints intersect); anyOf / oneOf stay as groups of alternatives. Parsing is where keyword
// support is decided: an unsupported keyword is an error naming it.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "grammar/json_numbers.h"
#include "grammar/json_schema_options.h"
#include "grammar/json_schema_refs.h"

namespace deepinfer::grammar {

namespace json_type {
constexpr uint8_t kNull = 1, kBoolean = 2, kInteger = 4, kFraction = 8, kString = 16, kArray = 32, kObject = 64;
constexpr uint8_t kNumber = kInteger | kFraction;  // integers and numbers with a fractional part
constexpr uint8_t kAll = 127;
}  // namespace json_type

// A conjunction of subschemas (empty: any value).
using SchemaConj = std::vector<SchemaRef>;

struct PropertySchema {
    std::string name;
    SchemaConj schemas;
};

struct SchemaNode {
    uint8_t types = json_type::kAll;
    std::optional<std::vector<Json>> allowed_values;  // enum / const
    // strings
    int64_t min_length = 0, max_length = -1;
    std::vector<std::string> patterns, formats;
    // numbers
    NumberConstraints numbers;
    std::vector<Decimal> multiple_of;
    // arrays
    std::vector<SchemaConj> prefix_items;
    SchemaConj items;
    bool items_forbidden = false;
    int64_t min_items = 0, max_items = -1;
    // objects
    std::vector<PropertySchema> properties;
    std::set<std::string> required;
    std::vector<PropertySchema> pattern_properties;  // name = the pattern
    SchemaConj property_names;                       // every key must satisfy these
    SchemaConj additional;
    bool additional_forbidden = false;
    // combinators
    std::vector<std::vector<SchemaRef>> any_of, one_of;
    std::vector<SchemaRef> negated;
    std::optional<SchemaRef> reference;  // the node is exactly this $ref (kept so recursion works)

    const PropertySchema* property(const std::string& name) const;
    bool constrains_keys() const {
        return !properties.empty() || !pattern_properties.empty() || !additional.empty() || additional_forbidden;
    }
};

// Behaviour that changed between drafts, picked from the root's $schema (2020-12 when absent).
struct SchemaDialect {
    bool ref_overrides_siblings = false;         // drafts 3 to 7: keywords next to $ref are ignored
    bool integer_excludes_zero_fraction = false; // drafts 3 and 4: 1.0 is not an integer

    static SchemaDialect of_root(const Json& root);
};

// The node constrains nothing but the types.
bool only_types(const SchemaNode& n);

class SchemaParser {
public:
    SchemaParser(const SchemaDocument& doc, const JsonSchemaOptions& options, SchemaDialect dialect)
        : doc_(doc), options_(options), dialect_(dialect) {}

    SchemaNode parse(const SchemaRef& ref);
    SchemaNode parse_conj(const SchemaConj& conj);
    // The node accepting what both accept.
    void merge_into(SchemaNode& into, SchemaNode other);

private:
    void parse_keywords(const Json& s, const std::string& base, SchemaNode& n);
    void parse_array_keywords(const Json& s, const std::string& base, SchemaNode& n);
    void parse_object_keywords(const Json& s, const std::string& base, SchemaNode& n);
    void parse_number_keywords(const Json& s, SchemaNode& n);

    const SchemaDocument& doc_;
    const JsonSchemaOptions& options_;
    SchemaDialect dialect_;
    int32_t ref_depth_ = 0;
};

// The keywords that are refused, with the reason shown in the error.
void check_keyword_support(const std::string& key, const Json& value, const Json& schema);

}  // namespace deepinfer::grammar
