// The JSON-Schema-Test-Suite (draft 2020-12, required and optional cases) as accept / reject tests:
// every valid instance, written compactly, must be accepted byte by byte and token by token; every
// invalid one rejected; a schema the compiler refuses counts as refused, never as an answer.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>

#include "conformance_util.h"
#include "grammar_test_util.h"
#include "json_text.h"

namespace deepinfer::grammar::test {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> suite_files() {
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(data_path("json-schema-test-suite/draft2020-12")))
        if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    return files;
}

// format.json checks the 2020-12 default (format is only an annotation); the optional format files
// check formats as assertions, which is what the engine does by default.
JsonSchemaOptions options_for(const fs::path& file) {
    JsonSchemaOptions o;
    o.property_order = JsonPropertyOrder::kSorted;  // instances are written with sorted keys
    if (file.filename() == "format.json") o.formats = JsonFormats::kAnnotation;
    return o;
}

TEST(JsonSchemaSuite, ValidAcceptedInvalidRejectedOrRefused) {
    GrammarCompiler compiler(deepseek_vocabulary());
    ConformanceTally tally;
    int num_cases = 0;
    for (const fs::path& file : suite_files()) {
        std::string name = fs::relative(file, data_path("json-schema-test-suite/draft2020-12")).string();
        JsonText cases = parse_json_text(read_file(file.string()));
        for (const JsonText& c : cases.items) {
            ++num_cases;
            const JsonText& tests = *c.find("tests");
            std::string label = name + " / " + c.find("description")->text;
            auto compiled = compiler.compile_json_schema(write_json_text(*c.find("schema"), false), options_for(file));
            if (!compiled.ok()) {
                ++tally.refused_cases;
                tally.refused_instances += static_cast<int>(tests.items.size());
                ++tally.refusal_reasons[compiled.status().message()];
                continue;
            }
            for (const JsonText& t : tests.items) {
                bool valid = t.find("valid")->kind == JsonText::Kind::kTrue;
                std::string text = write_json_text(*t.find("data"), true);
                tally.add(check_instance(compiled.value(), text), valid, label + " / " + t.find("description")->text + " " + text);
            }
        }
    }
    std::cout << tally.summary("JSON-Schema-Test-Suite draft 2020-12 (" + std::to_string(num_cases) + " schemas)");
    EXPECT_TRUE(tally.blocked_valid.empty());
    EXPECT_TRUE(tally.accepted_invalid.empty());
    EXPECT_TRUE(tally.inconsistent.empty());
    EXPECT_TRUE(tally.mask_mismatches.empty());
    EXPECT_GT(tally.valid_accepted + tally.invalid_rejected, 1000);
}

// The same cases with flexible whitespace, instances pretty-printed (newlines, indentation, ", ").
TEST(JsonSchemaSuite, FlexibleWhitespaceAcceptsPrettyPrintedInstances) {
    GrammarCompiler compiler(deepseek_vocabulary());
    ConformanceTally tally;
    for (const fs::path& file : suite_files()) {
        JsonSchemaOptions options = options_for(file);
        options.whitespace = JsonWhitespace::kFlexible;
        options.max_whitespace = 64;
        for (const JsonText& c : parse_json_text(read_file(file.string())).items) {
            auto compiled = compiler.compile_json_schema(write_json_text(*c.find("schema"), false), options);
            if (!compiled.ok()) continue;
            for (const JsonText& t : c.find("tests")->items) {
                std::string text = write_json_text(*t.find("data"), true, 2);
                tally.add(check_instance(compiled.value(), text), t.find("valid")->kind == JsonText::Kind::kTrue,
                          file.filename().string() + " / " + c.find("description")->text + " " + text);
            }
        }
    }
    std::cout << tally.summary("JSON-Schema-Test-Suite, flexible whitespace");
    EXPECT_TRUE(tally.blocked_valid.empty());
    EXPECT_TRUE(tally.accepted_invalid.empty());
    EXPECT_TRUE(tally.inconsistent.empty());
    EXPECT_TRUE(tally.mask_mismatches.empty());
    EXPECT_GT(tally.valid_accepted, 600);
}

}  // namespace
}  // namespace deepinfer::grammar::test
