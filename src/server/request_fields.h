#pragma once
// Checked access to the fields of an OpenAI request body: each getter checks the JSON type (and
// integer range) and throws BadField naming the field, so a wrong type is a 400, never a
// json::type_error escaping as a 500.
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace deepinfer::server {

struct BadField {
    std::string param, message;
};

// `name` of object `j`; nullopt when absent or null. `where` prefixes the message ("tools[0].").
template <typename T>
std::optional<T> get_field(const nlohmann::json& j, const char* name, const char* type_name, const std::string& where = "") {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return std::nullopt;
    bool ok = false;
    if constexpr (std::is_same_v<T, bool>) ok = it->is_boolean();
    else if constexpr (std::is_integral_v<T>) ok = it->is_number_integer();
    else if constexpr (std::is_floating_point_v<T>) ok = it->is_number();
    else if constexpr (std::is_same_v<T, std::string>) ok = it->is_string();
    std::string full = where + name;
    if (!ok) throw BadField{full, full + " must be " + type_name};
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        bool too_big = it->is_number_unsigned() && it->template get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max());
        bool too_small = !it->is_number_unsigned() && it->template get<int64_t>() < static_cast<int64_t>(std::numeric_limits<T>::min());
        if (too_big || too_small) throw BadField{full, full + " is out of range"};
    }
    return it->template get<T>();
}

// A required string field.
std::string required_string(const nlohmann::json& j, const char* name, const std::string& where);

// Refuses fields this server does not know, so none is silently ignored.
void reject_unknown_fields(const nlohmann::json& j, std::initializer_list<std::string_view> known, const std::string& where = "");

// Whether JSON text nests arrays / objects deeper than `max_depth` (a scan, no recursion), so
// that nothing downstream recurses as deep as a request asks.
bool json_nesting_exceeds(std::string_view text, int max_depth);

}  // namespace deepinfer::server
