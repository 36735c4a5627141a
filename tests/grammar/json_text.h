#pragma once
// A small JSON reader / writer for the tests, independent of the engine: it keeps number literals
// exactly as written (1.0 stays 1.0, big integers keep every digit) and object members in source
// order, and writes compact JSON with members in source or sorted order.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deepinfer::grammar::test {

struct JsonText {
    enum class Kind { kNull, kTrue, kFalse, kNumber, kString, kArray, kObject } kind = Kind::kNull;
    std::string text;  // number literal, or decoded string (UTF-8)
    std::vector<JsonText> items;                           // array elements
    std::vector<std::pair<std::string, JsonText>> members;  // object members

    const JsonText* find(std::string_view key) const {
        for (const auto& [k, v] : members)
            if (k == key) return &v;
        return nullptr;
    }
};

// Throws std::runtime_error on malformed input.
JsonText parse_json_text(std::string_view text);
// Compact, or with `indent` spaces per level, a newline before every member and ": " / ", ".
std::string write_json_text(const JsonText& value, bool sort_keys, int indent = 0);
std::string read_file(const std::string& path);

}  // namespace deepinfer::grammar::test
