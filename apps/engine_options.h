#pragma once
// Flags shared by the subcommands that run the engine (generate, bench, serve), parsed into the
// one EngineConfig tree, and the sampling flags parsed into SamplingParams.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "deepinfer/config.h"
#include "deepinfer/request.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer::apps {

struct EngineFlags {
    EngineConfig config;
    std::string cache_memory = "2GiB";
    bool no_async = false;
    bool prefix_cache = true;
    std::string host_cache_memory = "0";
    std::string disk_cache_size = "16GiB";
    std::vector<std::string> kernel_knobs;  // --kernel name=value
};

void add_engine_options(CLI::App* cmd, EngineFlags& flags);
// Resolves defaults (the bundled model, memory size) after parsing; throws deepinfer::Error.
EngineConfig finish_engine_config(EngineFlags& flags, const std::string& log_level);
struct SamplingFlags {
    SamplingParams params;
    int64_t seed = -1;
    SamplingParams finish() const;
};
void add_sampling_options(CLI::App* cmd, SamplingFlags& flags);

// Structured output: --json-schema FILE | --regex RE | --grammar FILE (EBNF).
struct GrammarFlags {
    std::string json_schema_file, regex, grammar_file;
    bool flexible_whitespace = false;
    // The spec (files read); kind kNone when no flag was given. Throws deepinfer::Error.
    GrammarSpec finish() const;
};
void add_grammar_options(CLI::App* cmd, GrammarFlags& flags);

// "2GiB", "512MiB", "1500000" -> bytes.
int64_t parse_bytes(const std::string& text);
// The model used when --model is not given: $DEEPINFER_MODEL, else models/deepinfer-nano next to
// the source tree the binary was built in (build/bin/../../models/deepinfer-nano).
std::string default_model_dir();

}  // namespace deepinfer::apps
