#pragma once
// $ref resolution inside one schema document: base URIs from $id (RFC 3986 reference resolution),
// $anchor / $dynamicAnchor names, and JSON pointer fragments. References to other documents are
// compile errors.
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <string_view>

namespace deepinfer::grammar {

using Json = nlohmann::ordered_json;

// A subschema and the base URI its own $refs resolve against.
struct SchemaRef {
    const Json* schema;
    std::string base;
};

std::string resolve_uri(std::string_view base, std::string_view reference);

class SchemaDocument {
public:
    explicit SchemaDocument(const Json& root);

    SchemaRef root() const { return {&root_, base_of(&root_)}; }
    // The subschema `reference` names when it appears in a schema with base URI `base`.
    SchemaRef resolve(std::string_view reference, std::string_view base) const;
    // The base URI of an indexed subschema, `fallback` for one the index has not seen.
    std::string base_of(const Json* schema, const std::string& fallback = {}) const;

private:
    void index(const Json& schema, const std::string& base);
    SchemaRef follow_pointer(const Json* from, std::string base, std::string_view pointer, std::string_view reference) const;

    const Json& root_;
    std::map<std::string, const Json*> resources_;  // absolute URI (no fragment) -> resource root
    std::map<std::string, const Json*> anchors_;    // URI#name -> subschema
    std::map<const Json*, std::string> bases_;
};

}  // namespace deepinfer::grammar
