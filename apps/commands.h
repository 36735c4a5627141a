#pragma once
// Subcommands of the deepinfer binary: each registers its flags on the CLI11 app and runs from
// the parsed options. Exit code 0 on success; errors propagate as exceptions to main().
#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "apps/engine_options.h"
#include "apps/serve_load.h"
#include "cluster/router/router.h"
#include "model/causal_lm.h"

namespace deepinfer::apps {

// How `logits` and `eval` load and run a model (no engine around it).
struct ModelRunOptions {
    int threads = 0;
    std::string device = "cpu";
    std::string quantize;
    std::string precision;
};
void add_model_run_options(CLI::App* cmd, ModelRunOptions& opts);
std::unique_ptr<model::CausalLm> load_model(const std::string& dir, kernels::Backend& backend, const ModelRunOptions& opts);

struct LogitsOptions {
    std::string model_dir, input_path, output_path;
    int64_t chunk = 0;
    int64_t decode_from = -1;
    ModelRunOptions run;
};
void add_logits_command(CLI::App& app, LogitsOptions& opts);
int run_logits(const LogitsOptions& opts);
// The int64 (or int32) input_ids of a safetensors file as int32, flat, with their shape; and
// those of shape [L] (or [1, L]). Throw deepinfer::Error.
struct InputIds {
    std::vector<int32_t> ids;
    std::vector<int64_t> shape;
};
InputIds read_input_id_tensor(const std::string& path);
std::vector<int32_t> read_input_ids(const std::string& path);

struct EvalOptions {
    std::string model_dir, tokenizer_dir, jsonl_file, field = "text", tokens_file, compare_file, input_file, json_file;
    std::vector<std::string> text_files;
    int64_t context = 1024;
    ModelRunOptions run;
};
void add_eval_command(CLI::App& app, EvalOptions& opts);
int run_eval(const EvalOptions& opts);

struct GenerateOptions {
    std::string prompt, prompts_file, output_file;
    EngineFlags engine;
    SamplingFlags sampling;
    GrammarFlags grammar;
};
void add_generate_command(CLI::App& app, GenerateOptions& opts);
int run_generate(GenerateOptions& opts, const std::string& log_level);

struct BenchOptions {
    int num_prompts = 64, input_len = 128, output_len = 64, concurrency = 0;
    uint64_t seed = 0;
    float temperature = 1.0f;
    bool json = false;
    std::vector<std::string> prompt_files;  // prompts cut from these texts instead of random tokens
    EngineFlags engine;
    GrammarFlags grammar;  // given: an unconstrained and a constrained pass, compared
};
void add_bench_command(CLI::App& app, BenchOptions& opts);
int run_bench(BenchOptions& opts, const std::string& log_level);

struct ServeOptions {
    ServerConfig server;
    std::string api_key_file;
    EngineFlags engine;
};
void add_serve_command(CLI::App& app, ServeOptions& opts);
int run_serve(ServeOptions& opts, const std::string& log_level);

struct BenchServeOptions {
    LoadOptions load;
    int server_pid = 0;
    bool json = false;
};
void add_bench_serve_command(CLI::App& app, BenchServeOptions& opts);
int run_bench_serve(BenchServeOptions& opts);

void add_router_command(CLI::App& app, cluster::RouterConfig& config);
int run_router(cluster::RouterConfig& config);

}  // namespace deepinfer::apps
