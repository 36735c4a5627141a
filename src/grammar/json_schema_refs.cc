#include "grammar/json_schema_refs.h"

#include <algorithm>
#include <iterator>

#include "grammar/encoding.h"
#include "grammar/grammar_error.h"

namespace deepinfer::grammar {

namespace {

struct UriParts {
    std::string scheme, authority, path, query, fragment;
    bool has_scheme = false, has_authority = false, has_query = false, has_fragment = false;
};

UriParts split_uri(std::string_view uri) {
    UriParts p;
    size_t hash = uri.find('#');
    if (hash != std::string_view::npos) p.has_fragment = true, p.fragment = uri.substr(hash + 1), uri = uri.substr(0, hash);
    size_t question = uri.find('?');
    if (question != std::string_view::npos) p.has_query = true, p.query = uri.substr(question + 1), uri = uri.substr(0, question);
    size_t colon = uri.find(':');
    size_t slash = uri.find('/');
    if (colon != std::string_view::npos && colon > 0 && (slash == std::string_view::npos || colon < slash)) {
        p.has_scheme = true;
        p.scheme = uri.substr(0, colon);
        uri = uri.substr(colon + 1);
    }
    if (uri.substr(0, 2) == "//") {
        p.has_authority = true;
        uri = uri.substr(2);
        size_t end = uri.find('/');
        p.authority = uri.substr(0, end);
        uri = end == std::string_view::npos ? std::string_view() : uri.substr(end);
    }
    p.path = uri;
    return p;
}

std::string remove_dot_segments(std::string path) {
    std::string out;
    while (!path.empty()) {
        if (path.rfind("../", 0) == 0) path.erase(0, 3);
        else if (path.rfind("./", 0) == 0) path.erase(0, 2);
        else if (path.rfind("/./", 0) == 0) path.erase(0, 2);
        else if (path == "/.") path = "/";
        else if (path.rfind("/../", 0) == 0 || path == "/..") {
            path = path == "/.." ? "/" : path.substr(3);
            size_t last = out.rfind('/');
            out.erase(last == std::string::npos ? 0 : last);
        } else if (path == "." || path == "..") {
            path.clear();
        } else {
            size_t next = path.find('/', path[0] == '/' ? 1 : 0);
            out += path.substr(0, next);
            path.erase(0, next == std::string::npos ? path.size() : next);
        }
    }
    return out;
}

std::string join(const UriParts& p) {
    std::string out;
    if (p.has_scheme) out += p.scheme + ":";
    if (p.has_authority) out += "//" + p.authority;
    out += p.path;
    if (p.has_query) out += "?" + p.query;
    if (p.has_fragment) out += "#" + p.fragment;
    return out;
}

std::string without_fragment(const std::string& uri) { return uri.substr(0, uri.find('#')); }

std::string percent_decode(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        size_t next = i + 1;
        uint32_t byte = 0;
        if (s[i] == '%' && read_hex(s, next, 2, byte)) {
            out.push_back(static_cast<char>(byte));
            i = next - 1;
        } else {
            out.push_back(s[i]);
        }
    }
    return out;
}

}  // namespace

// RFC 3986 section 5.2.2.
std::string resolve_uri(std::string_view base, std::string_view reference) {
    UriParts r = split_uri(reference), b = split_uri(base), t;
    if (r.has_scheme) {
        t = r;
        t.path = remove_dot_segments(r.path);
    } else {
        t.scheme = b.scheme, t.has_scheme = b.has_scheme;
        if (r.has_authority) {
            t.authority = r.authority, t.has_authority = true;
            t.path = remove_dot_segments(r.path);
            t.query = r.query, t.has_query = r.has_query;
        } else {
            t.authority = b.authority, t.has_authority = b.has_authority;
            if (r.path.empty()) {
                t.path = b.path;
                t.query = r.has_query ? r.query : b.query, t.has_query = r.has_query || b.has_query;
            } else {
                if (r.path[0] == '/') t.path = remove_dot_segments(r.path);
                else if (b.has_authority && b.path.empty()) t.path = remove_dot_segments("/" + r.path);
                else {
                    size_t last = b.path.rfind('/');
                    t.path = remove_dot_segments((last == std::string::npos ? "" : b.path.substr(0, last + 1)) + r.path);
                }
                t.query = r.query, t.has_query = r.has_query;
            }
        }
    }
    t.fragment = r.fragment, t.has_fragment = r.has_fragment;
    return join(t);
}

SchemaDocument::SchemaDocument(const Json& root) : root_(root) {
    resources_[""] = &root;
    index(root, "");
}

void SchemaDocument::index(const Json& schema, const std::string& parent_base) {
    if (!schema.is_object()) return;
    std::string base = parent_base;
    auto id = schema.find("$id");
    if (id != schema.end() && id->is_string()) {
        std::string resolved = resolve_uri(parent_base, id->get<std::string>());
        std::string frag = resolved.find('#') == std::string::npos ? "" : resolved.substr(resolved.find('#') + 1);
        if (!frag.empty() && without_fragment(resolved) == without_fragment(parent_base)) {
            anchors_[resolved] = &schema;  // draft-7 style "$id": "#name"
        } else {
            base = without_fragment(resolved);
            resources_[base] = &schema;
        }
    }
    bases_[&schema] = base;
    for (const char* key : {"$anchor", "$dynamicAnchor"}) {
        auto a = schema.find(key);
        if (a != schema.end() && a->is_string()) anchors_[base + "#" + a->get<std::string>()] = &schema;
    }
    // Only keywords that hold subschemas: an $id inside an unknown keyword is plain data.
    static constexpr std::string_view kSchemaMaps[] = {"properties", "patternProperties", "$defs", "definitions",
                                                       "dependentSchemas"};
    static constexpr std::string_view kSchemaValues[] = {
        "items", "prefixItems", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "contains",
        "additionalProperties", "additionalItems", "propertyNames", "unevaluatedItems", "unevaluatedProperties",
        "contentSchema"};
    for (const auto& [key, value] : schema.items()) {
        bool map = std::find(std::begin(kSchemaMaps), std::end(kSchemaMaps), key) != std::end(kSchemaMaps);
        bool direct = std::find(std::begin(kSchemaValues), std::end(kSchemaValues), key) != std::end(kSchemaValues);
        if (map && value.is_object()) {
            for (const auto& [name, sub] : value.items()) index(sub, base);
        } else if (direct && value.is_array()) {
            for (const auto& sub : value) index(sub, base);
        } else if (direct) {
            index(value, base);
        }
    }
}

std::string SchemaDocument::base_of(const Json* schema, const std::string& fallback) const {
    auto it = bases_.find(schema);
    return it == bases_.end() ? fallback : it->second;
}

SchemaRef SchemaDocument::resolve(std::string_view reference, std::string_view base) const {
    std::string absolute = resolve_uri(base, reference);
    size_t hash = absolute.find('#');
    std::string doc = absolute.substr(0, hash);
    std::string fragment = hash == std::string::npos ? "" : percent_decode(absolute.substr(hash + 1));
    auto resource = resources_.find(doc);
    if (resource == resources_.end())
        grammar_fail("unresolved $ref '{}' (references to other documents are not supported)", std::string(reference));
    if (fragment.empty()) return {resource->second, base_of(resource->second)};
    if (fragment[0] == '/') return follow_pointer(resource->second, doc, fragment, reference);
    auto anchor = anchors_.find(doc + "#" + fragment);
    if (anchor == anchors_.end()) grammar_fail("unresolved $ref '{}': no anchor '{}'", std::string(reference), fragment);
    return {anchor->second, base_of(anchor->second)};
}

SchemaRef SchemaDocument::follow_pointer(const Json* node, std::string base, std::string_view pointer,
                                         std::string_view reference) const {
    size_t pos = 1;
    while (pos <= pointer.size()) {
        size_t end = pointer.find('/', pos);
        std::string token(pointer.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
        for (size_t i; (i = token.find("~1")) != std::string::npos;) token.replace(i, 2, 1, '/');
        for (size_t i; (i = token.find("~0")) != std::string::npos;) token.replace(i, 2, 1, '~');
        if (node->is_object() && node->contains(token)) node = &(*node)[token];
        else if (node->is_array() && !token.empty() && token.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(token) < node->size())
            node = &(*node)[std::stoul(token)];
        else grammar_fail("unresolved $ref '{}': no '{}' in the document", std::string(reference), token);
        auto known = bases_.find(node);
        if (known != bases_.end()) base = known->second;
        if (end == std::string_view::npos) break;
        pos = end + 1;
    }
    return {node, base};
}

}  // namespace deepinfer::grammar
