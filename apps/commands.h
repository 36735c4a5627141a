#pragma once
// Subcommands of the deepinfer binary: each registers its flags on the CLI11 app and runs from
// the parsed options. Exit code 0 on success; errors propagate as exceptions to main().
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace deepinfer::apps {

struct LogitsOptions {
    std::string model_dir, input_path, output_path;
    int64_t chunk = 0;
    int64_t decode_from = -1;
    int threads = 0;
};
void add_logits_command(CLI::App& app, LogitsOptions& opts);
int run_logits(const LogitsOptions& opts);

}  // namespace deepinfer::apps
