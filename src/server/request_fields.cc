#include "server/request_fields.h"

namespace deepinfer::server {

std::string required_string(const nlohmann::json& j, const char* name, const std::string& where) {
    auto v = get_field<std::string>(j, name, "a string", where);
    if (!v) throw BadField{where + name, where + name + " is required"};
    return *v;
}

void reject_unknown_fields(const nlohmann::json& j, std::initializer_list<std::string_view> known, const std::string& where) {
    for (const auto& [key, value] : j.items()) {
        bool found = false;
        for (std::string_view k : known) found = found || k == key;
        if (!found) throw BadField{where + key, "unknown field '" + where + key + "' (not supported by this server)"};
    }
}

bool json_nesting_exceeds(std::string_view text, int max_depth) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (char c : text) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        else if (c == '[' || c == '{') {
            if (++depth > max_depth) return true;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return false;
}

}  // namespace deepinfer::server
