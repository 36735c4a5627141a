// MaskBench (JSONSchemaBench) schemas with their valid and invalid instances as accept / reject
// tests, the same way as the JSON-Schema-Test-Suite: an instance labelled valid must be accepted,
// one labelled invalid rejected, and a schema the compiler refuses counts as refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>

#include "conformance_util.h"
#include "grammar_test_util.h"
#include "json_text.h"

namespace deepinfer::grammar::test {
namespace {

namespace fs = std::filesystem;

TEST(MaskBench, ValidAcceptedInvalidRejectedOrRefused) {
    GrammarCompiler compiler(deepseek_vocabulary());
    JsonSchemaOptions options;
    options.property_order = JsonPropertyOrder::kSorted;  // instances are written with sorted keys
    ConformanceTally tally;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(data_path("maskbench")))
        if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
        JsonText doc = parse_json_text(read_file(file.string()));
        const JsonText& tests = *doc.find("tests");
        auto compiled = compiler.compile_json_schema(write_json_text(*doc.find("schema"), false), options);
        if (!compiled.ok()) {
            ++tally.refused_cases;
            tally.refused_instances += static_cast<int>(tests.items.size());
            ++tally.refusal_reasons[compiled.status().message()];
            continue;
        }
        for (size_t i = 0; i < tests.items.size(); ++i) {
            const JsonText& t = tests.items[i];
            bool valid = t.find("valid")->kind == JsonText::Kind::kTrue;
            std::string text = write_json_text(*t.find("data"), true);
            tally.add(check_instance(compiled.value(), text), valid, file.filename().string() + " #" + std::to_string(i));
        }
    }
    std::cout << tally.summary("MaskBench subset (" + std::to_string(files.size()) + " schemas)");
    EXPECT_TRUE(tally.blocked_valid.empty());
    EXPECT_TRUE(tally.accepted_invalid.empty());
    EXPECT_TRUE(tally.inconsistent.empty());
    EXPECT_TRUE(tally.mask_mismatches.empty());
    EXPECT_GT(files.size(), 300u);
}

}  // namespace
}  // namespace deepinfer::grammar::test
