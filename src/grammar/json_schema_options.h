#pragma once
// Options of the JSON Schema front-end.
#include <cstdint>
#include <string>

namespace deepinfer::grammar {

enum class JsonWhitespace {
    kCompact,   // no whitespace anywhere: {"a":1,"b":[true]}
    kFlexible,  // [ \t\n\r] allowed between tokens, at most max_whitespace in a row
};

enum class JsonPropertyOrder {
    kSchema,  // declared properties in the order the schema lists them
    kSorted,  // declared properties sorted by name (bytewise)
};

enum class JsonFormats {
    kAssert,      // `format` constrains strings; an unsupported format is a compile error
    kAnnotation,  // `format` is ignored (the 2020-12 default for validators)
};

struct JsonSchemaOptions {
    JsonWhitespace whitespace = JsonWhitespace::kCompact;
    int32_t max_whitespace = 16;
    JsonPropertyOrder property_order = JsonPropertyOrder::kSchema;
    JsonFormats formats = JsonFormats::kAssert;

    std::string cache_key() const {
        return std::to_string(int(whitespace)) + "," + std::to_string(max_whitespace) + "," +
               std::to_string(int(property_order)) + "," + std::to_string(int(formats));
    }
};

}  // namespace deepinfer::grammar
