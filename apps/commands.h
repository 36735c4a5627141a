#pragma once
// Subcommands of the deepinfer binary: each registers its flags on the CLI11 app and runs from
// the parsed options. Exit code 0 on success; errors propagate as exceptions to main().
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "apps/engine_options.h"
#include "apps/serve_load.h"
#include "cluster/router/router.h"

namespace deepinfer::apps {

struct LogitsOptions {
    std::string model_dir, input_path, output_path;
    int64_t chunk = 0;
    int64_t decode_from = -1;
    int threads = 0;
    std::string device = "cpu";
    std::string quantize;
    std::string precision;
};
void add_logits_command(CLI::App& app, LogitsOptions& opts);
int run_logits(const LogitsOptions& opts);

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
