// `deepinfer eval` end to end: perplexity over token rows equals HF transformers' on the bundled
// model's held-out rows (computed at training time), windows score every token once, bits per
// byte count the documents' own bytes, `--compare` reports agreement with HF's logits and sees a
// reference that disagrees, and bad input is a message with a non-zero exit code.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "tests/apps/cli_run.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

using test::RunResult;

RunResult run(const std::string& args) { return test::run_deepinfer("eval " + args); }

std::string nano_dir() { return std::string(DEEPINFER_SOURCE_DIR) + "/models/deepinfer-nano"; }

class EvalCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("di_eval_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }

    // Runs eval with --json and returns what it wrote.
    nlohmann::json eval_json(const std::string& args) {
        RunResult r = run(args + " --threads 2 --json " + path("out.json"));
        EXPECT_EQ(r.exit_code, 0) << r.output;
        std::ifstream in(path("out.json"));
        return nlohmann::json::parse(in, nullptr, false);
    }

    // The first `rows` held-out rows as their own file, and HF's perplexity over them.
    double held_out_rows(int64_t rows, const std::string& name) {
        SafetensorsFile heldout(test::data_path("nano_heldout.safetensors"));
        Tensor ids = heldout.tensor("input_ids"), nll = heldout.tensor("hf_mean_nll");
        write_safetensors(path(name), {{"input_ids", ids.rows(0, rows)}});
        double mean = 0;
        for (int64_t r = 0; r < rows; ++r) mean += nll.data<float>()[r] / static_cast<double>(rows);
        return std::exp(mean);
    }

    fs::path dir_;
};

TEST_F(EvalCli, TokenRowsGiveHfPerplexityAndBitsPerByte) {
    double hf = held_out_rows(6, "rows.safetensors");
    nlohmann::json j = eval_json("--model " + nano_dir() + " --tokens " + path("rows.safetensors") + " --precision exact");
    EXPECT_EQ(j["documents"], 6);
    EXPECT_EQ(j["tokens"], 6 * 512);
    EXPECT_NEAR(j["perplexity"].get<double>() / hf, 1.0, 1e-3) << "HF " << hf;
    // Bytes: the text of the scored tokens (each row's first token is context only).
    auto tok = tokenizer::Tokenizer::from_dir(nano_dir());
    SafetensorsFile rows(path("rows.safetensors"));
    Tensor ids = rows.tensor("input_ids");
    int64_t bytes = 0;
    for (int64_t r = 0; r < 6; ++r) {
        std::vector<int32_t> row(ids.data<int64_t>() + r * 513 + 1, ids.data<int64_t>() + (r + 1) * 513);
        bytes += static_cast<int64_t>(tok->decode(row).size());
    }
    EXPECT_EQ(j["bytes"], bytes);
    EXPECT_NEAR(j["bits_per_byte"].get<double>(), j["nll"].get<double>() / std::log(2.0) / bytes, 1e-9);
}

// A short context scores the same tokens in overlapping windows; with half a window of 128 tokens
// before each, the perplexity stays near the full-context one.
TEST_F(EvalCli, WindowsScoreEveryTokenOnce) {
    held_out_rows(2, "rows.safetensors");
    std::string args = "--model " + nano_dir() + " --tokens " + path("rows.safetensors");
    nlohmann::json full = eval_json(args), windows = eval_json(args + " --context 256");
    EXPECT_EQ(windows["tokens"], full["tokens"]);
    EXPECT_EQ(windows["context"], 256);
    EXPECT_NE(windows["nll"], full["nll"]);  // other contexts, other numbers
    EXPECT_NEAR(windows["perplexity"].get<double>() / full["perplexity"].get<double>(), 1.0, 0.05);
}

TEST_F(EvalCli, TextFilesAndJsonlCountTheirOwnBytes) {
    std::vector<std::string> texts = {"def add(a, b):\n    return a + b\n", "import os\nprint(os.getcwd())  # é\n"};
    std::ofstream(path("a.py")) << texts[0];
    std::ofstream(path("b.py")) << texts[1];
    std::ofstream jsonl(path("d.jsonl"));
    for (const auto& t : texts) jsonl << nlohmann::json{{"body", t}}.dump() << "\n";
    jsonl.close();
    auto tok = tokenizer::Tokenizer::from_dir(nano_dir());
    int64_t tokens = 0, bytes = 0;
    for (const auto& t : texts) {
        tokens += static_cast<int64_t>(tok->encode(t, false).value().size());  // each scored after BOS
        bytes += static_cast<int64_t>(t.size());
    }
    nlohmann::json files = eval_json("--text " + path("a.py") + " " + path("b.py"));
    nlohmann::json lines = eval_json("--jsonl " + path("d.jsonl") + " --field body");
    for (const nlohmann::json& j : {files, lines}) {
        EXPECT_EQ(j["documents"], 2);
        EXPECT_EQ(j["tokens"], tokens);
        EXPECT_EQ(j["bytes"], bytes);
        EXPECT_NEAR(j["bits_per_byte"].get<double>(), j["nll"].get<double>() / std::log(2.0) / bytes, 1e-9);
    }
    EXPECT_DOUBLE_EQ(files["nll"].get<double>(), lines["nll"].get<double>());
}

// Against HF's logits on a fixture: agreement; against the same logits with the best token of
// every fifth position pushed down, the disagreement shows.
TEST_F(EvalCli, CompareReportsAgreementAndSeesABadReference) {
    std::string model = test::data_path("v4/v4_tiny_b"), ref = model + "/reference.safetensors";
    nlohmann::json good = eval_json("--model " + model + " --compare " + ref);
    EXPECT_EQ(good["positions"], 150);
    EXPECT_EQ(good["top1_agreement"], 1.0);
    EXPECT_LT(good["max_abs_diff"].get<double>(), 1e-3);
    EXPECT_LT(good["mean_kl"].get<double>(), 1e-6);

    SafetensorsFile file(ref);
    Tensor want = file.tensor("logits"), logits = Tensor::empty(DType::kF32, want.shape());
    std::memcpy(logits.raw(), want.raw(), want.nbytes());
    int64_t vocab = logits.dim(1);
    for (int64_t t = 0; t < logits.dim(0); t += 5) {
        float* row = logits.data<float>() + t * vocab;
        *std::max_element(row, row + vocab) -= 20.0f;
    }
    write_safetensors(path("bad.safetensors"), {{"logits", logits}});
    nlohmann::json bad = eval_json("--model " + model + " --compare " + path("bad.safetensors") + " --input " + ref);
    EXPECT_LE(bad["top1_agreement"].get<double>(), 0.81);
    EXPECT_GT(bad["mean_kl"].get<double>(), 1e-3);
    EXPECT_GT(bad["max_abs_diff"].get<double>(), 19.0);
}

TEST_F(EvalCli, BadInputExitsNonZeroWithAMessage) {
    std::ofstream(path("bad.jsonl")) << R"({"text": "ok"})" << "\n" << "{oops" << "\n";
    std::ofstream(path("nofield.jsonl")) << R"({"prompt": "ok"})" << "\n";
    std::ofstream(path("empty.jsonl")) << "\n";
    Tensor flat = Tensor::empty(DType::kI64, {4});
    for (int i = 0; i < 4; ++i) flat.data<int64_t>()[i] = i;
    write_safetensors(path("flat.safetensors"), {{"input_ids", flat}});
    std::string v4 = test::data_path("v4/v4_tiny_b");
    std::vector<std::pair<std::string, std::string>> cases = {
        {"", "needs --text, --jsonl, --tokens or --compare"},
        {"--jsonl " + path("bad.jsonl"), "bad.jsonl:2: not a JSON object"},
        {"--jsonl " + path("nofield.jsonl"), "no string field \"text\""},
        {"--jsonl " + path("empty.jsonl"), "holds no documents"},
        {"--tokens " + path("flat.safetensors"), "input_ids must be int64 [N, L]"},
        {"--jsonl " + path("bad.jsonl") + " --text " + path("bad.jsonl"), "excludes"},
        {"--input " + v4 + "/reference.safetensors --text " + path("bad.jsonl"), "--input goes with --compare"},
        {"--model " + v4 + " --text " + path("bad.jsonl"), "has no tokenizer.json"},
        {"--model " + v4 + " --compare " + test::data_path("v41/v41_tiny_a/reference.safetensors"), "logits must be float32"},
        {"--text /nonexistent.py", "nonexistent"},
        {"--jsonl " + path("bad.jsonl") + " --context 1", "context"},
    };
    for (const auto& [args, needle] : cases) {
        RunResult r = run(args);
        EXPECT_NE(r.exit_code, 0) << args;
        EXPECT_NE(r.output.find(needle), std::string::npos) << args << " -> " << r.output;
    }
}

}  // namespace
}  // namespace deepinfer
