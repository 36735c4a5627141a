// Random outputs of compiled JSON Schemas (the JSON-Schema-Test-Suite and MaskBench schemas the
// compiler accepts), drawn token by token from the masks over the DeepSeek vocabulary, must parse
// and validate under python-jsonschema, an independent validator.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>

#include "conformance_util.h"
#include "grammar_test_util.h"
#include "json_text.h"
#include "validate_json.h"

namespace deepinfer::grammar::test {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> schema_texts() {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(data_path("json-schema-test-suite/draft2020-12"))) {
        if (e.path().extension() != ".json" || e.path().filename() == "format.json") continue;
        for (const JsonText& c : parse_json_text(read_file(e.path().string())).items) out.push_back(write_json_text(*c.find("schema"), false));
    }
    for (const auto& e : fs::directory_iterator(data_path("maskbench")))
        if (e.path().extension() == ".json") out.push_back(write_json_text(*parse_json_text(read_file(e.path().string())).find("schema"), false));
    std::sort(out.begin(), out.end());
    return out;
}

TEST(Generation, RandomOutputsOfJsonSchemasValidate) {
    std::mt19937 rng(2026);
    GrammarCompiler compiler(deepseek_vocabulary());
    nlohmann::json cases = nlohmann::json::array();
    int compiled = 0;
    for (const std::string& schema : schema_texts()) {
        auto g = compiler.compile_json_schema(schema);
        if (!g.ok()) continue;
        ++compiled;
        for (int k = 0; k < 2; ++k)
            if (auto text = random_output(g.value(), rng, 12, 150))
                cases.push_back({{"schema", nlohmann::json::parse(schema)}, {"text", *text}});
    }
    ASSERT_GT(cases.size(), 500u) << "of " << compiled << " schemas";
    std::vector<std::string> verdicts = deepinfer::test::validate_with_python(cases);
    ASSERT_EQ(verdicts.size(), cases.size()) << "python3 with jsonschema is needed (scripts/setup.sh installs it)";
    int invalid = 0, unjudged = 0;
    for (size_t i = 0; i < verdicts.size(); ++i) {
        if (verdicts[i].empty()) continue;
        if (verdicts[i][0] == '?') {
            ++unjudged;
            continue;
        }
        if (++invalid <= 20)
            ADD_FAILURE() << verdicts[i] << "\n  schema " << cases[i]["schema"].dump() << "\n  output " << cases[i]["text"].get<std::string>();
    }
    EXPECT_EQ(invalid, 0) << "of " << cases.size() << " outputs";
    EXPECT_LT(unjudged * 20, static_cast<int>(cases.size())) << "outputs the validator could not judge";
    std::cout << cases.size() << " random outputs of " << compiled << " schemas: " << invalid << " invalid, " << unjudged
              << " not judged by the validator\n";
}

}  // namespace
}  // namespace deepinfer::grammar::test
