// The deepinfer binary end to end: `logits` writes HF-matching logits, and bad arguments or files
// give a message and a non-zero exit code.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "tests/apps/cli_run.h"
#include "tests/runtime/test_models.h"
#include "tests/test_util.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

using test::RunResult;

RunResult run(const std::string& args) { return test::run_deepinfer(args); }

class LogitsCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("di_cli_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        model_ = test::data_path("v4/v4_tiny_b");
        input_ = model_ + "/reference.safetensors";  // holds input_ids (and the expected logits)
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string out(const std::string& name) const { return (dir_ / name).string(); }

    fs::path dir_;
    std::string model_, input_;
};

TEST_F(LogitsCli, WritesLogitsMatchingHfInEveryMode) {
    SafetensorsFile ref(input_);
    for (std::string mode : {"", "--chunk 7", "--decode-from 20", "--threads 1 --chunk 64"}) {
        RunResult r = run("logits --model " + model_ + " --input " + input_ + " --output " + out("l.safetensors") + " " + mode);
        ASSERT_EQ(r.exit_code, 0) << mode << ": " << r.output;
        SafetensorsFile got(out("l.safetensors"));
        Tensor logits = got.tensor("logits");
        EXPECT_EQ(logits.dtype(), DType::kF32);
        EXPECT_EQ(logits.shape(), ref.tensor("logits").shape());
        EXPECT_TRUE(test::all_close(logits, ref.tensor("logits"), 1e-3)) << mode;
    }
}

TEST_F(LogitsCli, BadArgumentsExitNonZeroWithAMessage) {
    std::string base = "logits --model " + model_ + " --input " + input_ + " --output " + out("x.safetensors");
    std::vector<std::pair<std::string, std::string>> cases = {
        {"logits --input " + input_ + " --output " + out("x"), "--model"},
        {base + " --chunk 0", "chunk"},
        {base + " --chunk 4 --decode-from 3", "excludes"},
        {base + " --decode-from 100000", "beyond"},
        {"logits --model /nonexistent --input " + input_ + " --output " + out("x"), "nonexistent"},
        {"logits --model " + model_ + " --input " + model_ + "/model-00001-of-00005.safetensors --output " + out("x"), "input_ids"},
        {"logits --model " + model_ + " --input " + model_ + "/config.json --output " + out("x"), "config.json"},
        {"frobnicate", "subcommand"},
    };
    for (const auto& [args, needle] : cases) {
        RunResult r = run(args);
        EXPECT_NE(r.exit_code, 0) << args;
        EXPECT_NE(r.output.find(needle), std::string::npos) << args << " -> " << r.output;
    }
}

TEST_F(LogitsCli, OutOfVocabularyIdsAreRejected) {
    Tensor ids = Tensor::empty(DType::kI64, {3});
    ids.data<int64_t>()[0] = 1;
    ids.data<int64_t>()[1] = 100000;
    ids.data<int64_t>()[2] = 2;
    write_safetensors(out("ids.safetensors"), {{"input_ids", ids}});
    RunResult r = run("logits --model " + model_ + " --input " + out("ids.safetensors") + " --output " + out("x"));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("100000 is out of range"), std::string::npos) << r.output;
}

class GenerateCli : public LogitsCli {
protected:
    void SetUp() override {
        LogitsCli::SetUp();
        model_ = test::make_model_dir("v4/v4_tiny_a", 1024);
    }
    std::string engine_flags() const { return " --model " + model_ + " --threads 2 --cache-memory 16MiB --max-sequences 8"; }
};

TEST_F(GenerateCli, OnePromptStreamsText) {
    RunResult r = run("generate" + engine_flags() + " --prompt 'the tea' --temperature 0 --max-tokens 12");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_GT(r.output.size(), 1u);
    RunResult again = run("generate" + engine_flags() + " --prompt 'the tea' --temperature 0 --max-tokens 12");
    EXPECT_EQ(again.output, r.output);  // greedy is deterministic
}

TEST_F(GenerateCli, PromptsFileGivesResultsInOrder) {
    std::ofstream(out("p.jsonl")) << R"({"prompt": "a tale"})" << "\n"
                                  << R"({"prompt": "one more", "max_tokens": 3, "n": 2, "temperature": 1.0, "seed": 4})" << "\n"
                                  << R"({"prompt": "and the last"})" << "\n";
    RunResult r = run("generate" + engine_flags() + " --prompts " + out("p.jsonl") + " --max-tokens 6 --output " + out("r.jsonl"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(out("r.jsonl"));
    std::string line;
    std::vector<nlohmann::json> rows;
    while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(rows.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rows[i]["index"], i);
    EXPECT_EQ(rows[0]["prompt"], "a tale");
    EXPECT_EQ(rows[0]["completion_tokens"], 6);
    EXPECT_EQ(rows[0]["finish_reason"], "length");
    EXPECT_EQ(rows[1]["texts"].size(), 2u);
    EXPECT_EQ(rows[1]["completion_tokens"], 6);  // 2 x 3
    EXPECT_NE(r.output.find("3 requests, 18 output tokens in"), std::string::npos) << r.output;

    std::ofstream(out("bad.jsonl")) << R"({"prompt": "ok"})" << "\n" << "{oops" << "\n";
    r = run("generate" + engine_flags() + " --prompts " + out("bad.jsonl"));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("line 2 is not valid JSON"), std::string::npos) << r.output;
    std::ofstream(out("typo.jsonl")) << R"({"prompt": "ok", "max_token": 3})" << "\n";
    r = run("generate" + engine_flags() + " --prompts " + out("typo.jsonl"));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("unknown field \"max_token\""), std::string::npos) << r.output;
    r = run("generate" + engine_flags() + " --prompt hi --max-tokens 100000000");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("maximum context"), std::string::npos) << r.output;
    r = run("generate" + engine_flags() + " --prompt hi --top-p 7");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("top_p"), std::string::npos) << r.output;
}

// Kernel knobs (--kernel name=value): a misspelt name, a value out of range, and knobs given to
// a backend without kernel choices (the CPU's) are refused, never ignored.
TEST_F(GenerateCli, KernelKnobsAreCheckedNotIgnored) {
    std::vector<std::pair<std::string, std::string>> cases = {
        {" --kernel attention_mmma=1", "no kernel knob named 'attention_mmma'"},
        {" --kernel attention_mma_blocks=3", "attention_mma_blocks takes 1|2, not 3"},
        {" --kernel moe_staged", "expected name=integer"},
        {" --kernel moe_staged=0", "the cpu backend has no kernel choices"},
    };
    for (const auto& [flag, needle] : cases) {
        RunResult r = run("generate" + engine_flags() + " --prompt hi --max-tokens 2" + flag);
        EXPECT_NE(r.exit_code, 0) << flag;
        EXPECT_NE(r.output.find(needle), std::string::npos) << flag << " -> " << r.output;
    }
}

TEST_F(GenerateCli, BenchReportsThroughputAsJson) {
    RunResult r = run("bench" + engine_flags() + " --num-prompts 6 --input-len 20 --output-len 5 --concurrency 3 --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    EXPECT_EQ(j["failed"], 0);
    EXPECT_GT(j["output_tokens_per_s"].get<double>(), 0.0);
    EXPECT_GE(j["tpot_ms"]["p99"].get<double>(), j["tpot_ms"]["p50"].get<double>());
    EXPECT_NEAR(j["input_tokens_per_s"].get<double>() / j["output_tokens_per_s"].get<double>(), 4.0, 1e-6);
}

}  // namespace
}  // namespace deepinfer
