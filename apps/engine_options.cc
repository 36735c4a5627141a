#include "apps/engine_options.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/ranges.h>

#include "base/error.h"

namespace deepinfer::apps {

int64_t parse_bytes(const std::string& text) {
    size_t pos = 0;
    double value = 0;
    try {
        value = std::stod(text, &pos);
    } catch (const std::exception&) {
        fail("'{}' is not a size (e.g. 2GiB, 512MiB)", text);
    }
    std::string unit = text.substr(pos);
    for (auto& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    double mult = unit.empty() || unit == "b" ? 1.0
                  : unit == "k" || unit == "kib" || unit == "kb" ? 1024.0
                  : unit == "m" || unit == "mib" || unit == "mb" ? 1048576.0
                  : unit == "g" || unit == "gib" || unit == "gb" ? 1073741824.0
                                                                 : -1.0;
    DI_CHECK(mult > 0 && value > 0, "'{}' is not a size (e.g. 2GiB, 512MiB)", text);
    return static_cast<int64_t>(value * mult);
}

std::string default_model_dir() {
    if (const char* env = std::getenv("DEEPINFER_MODEL"); env && *env) return env;
    char buf[4096];
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0) return "models/deepinfer-nano";
    buf[n] = '\0';
    return (std::filesystem::path(buf).parent_path() / "../../models/deepinfer-nano").lexically_normal().string();
}

namespace {

void add_prefix_cache_options(CLI::App* cmd, EngineFlags& f) {
    PrefixCacheConfig& p = f.config.cache.prefix;
    cmd->add_flag("--prefix-cache,!--no-prefix-cache", f.prefix_cache,
                  "keep block-aligned prompt prefixes after requests finish and reuse them (default on)");
    cmd->add_option("--host-cache-memory", f.host_cache_memory,
                    "prefix cache in host memory (page-locked on a GPU), e.g. 16GiB (default 0 = none)");
    cmd->add_option("--disk-cache-dir", p.disk_dir, "prefix cache directory on a local disk (kept across restarts)");
    cmd->add_option("--disk-cache-size", f.disk_cache_size, "size cap of --disk-cache-dir (default 16GiB)");
    cmd->add_option("--redis-url", p.remote_url, "prefix cache shared by engines in Redis, e.g. redis://127.0.0.1:6379");
    cmd->add_option("--redis-timeout-ms", p.remote_timeout_ms, "give up on a Redis operation after this long")
        ->check(CLI::PositiveNumber);
}

void add_speculative_options(CLI::App* cmd, SpeculativeConfig& s) {
    cmd->add_option("--speculative", s.method,
                    "speculative decoding: off; ngram (drafts looked up in the sequence's own earlier tokens); "
                    "dspark (the DSpark draft model of a DeepSeek-V4.1 checkpoint); mtp (the MTP head of a DeepSeek-V4 "
                    "checkpoint). Greedy output is the same as without it, sampled output has the same distribution")
        ->check(CLI::IsMember({"off", "ngram", "dspark", "mtp"}));
    cmd->add_option("--num-draft-tokens", s.num_draft_tokens, "drafted tokens verified per step and sequence (1-64)")
        ->check(CLI::Range(1, 64));
    cmd->add_option("--spec-verify", s.verify,
                    "confidence: each step verifies the drafts worth their cost (from the drafts kept so far and the "
                    "measured step time); fixed: every draft found")
        ->check(CLI::IsMember({"confidence", "fixed"}));
    cmd->add_option("--ngram-min", s.ngram_min, "shortest suffix the n-gram drafter matches")->check(CLI::PositiveNumber);
    cmd->add_option("--ngram-max", s.ngram_max, "longest suffix the n-gram drafter matches (tried first)")
        ->check(CLI::PositiveNumber);
}

}  // namespace

void add_engine_options(CLI::App* cmd, EngineFlags& f) {
    auto& c = f.config;
    cmd->add_option("--model", c.model.path, "HF model directory (default: the bundled deepinfer-nano)");
    cmd->add_option("--tokenizer", c.model.tokenizer_path, "directory with tokenizer.json (default: the model's)");
    cmd->add_option("--threads", c.model.threads, "CPU threads (default: all)")->check(CLI::NonNegativeNumber);
    cmd->add_option("--device", c.model.device, "cpu, cuda or cuda:N");
    cmd->add_option("--quantize", c.model.quantize, "re-encode weights at load: none, or q8 (8-bit blocks; CPU)")
        ->check(CLI::IsMember({"none", "q8"}));
    cmd->add_option("--precision", c.model.precision,
                    "matrix products: exact (fp32 activations), fast (bf16 activations), auto (fast on CUDA, the "
                    "model's own on the CPU)")
        ->check(CLI::IsMember({"auto", "exact", "fast"}));
    cmd->add_option("--kernel", f.kernel_knobs,
                    "a CUDA kernel choice, name=value (repeatable; defaults: the measured best): " +
                        fmt::format("{}", fmt::join(kernel_knob_help(), ", ")));
    cmd->add_option("--max-sequences", c.cache.max_sequences, "sequences resident in the cache at once")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--cache-memory", f.cache_memory, "cache size, e.g. 2GiB");
    cmd->add_option("--max-model-len", c.cache.max_model_len, "longest prompt + output (default and limit: the model's max_position_embeddings)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--max-batch-tokens", c.scheduler.max_batch_tokens, "token budget per step")->check(CLI::PositiveNumber);
    cmd->add_option("--max-prefill-chunk", c.scheduler.max_prefill_chunk,
                    "most prompt tokens a new request takes in its first step (default: half the step budget)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--max-running", c.scheduler.max_running, "sequences decoded together")->check(CLI::PositiveNumber);
    cmd->add_flag("--no-async", f.no_async, "plan each step only after the previous one finished");
    cmd->add_flag("--deterministic", c.deterministic,
                  "every request gets the same tokens and logprobs whatever else runs (a fixed seed unless given; "
                  "exact replays after prefix-cache hits); batch-invariant kernels on CUDA");
    cmd->add_option("--trace", c.trace_path, "write a Chrome-trace / Perfetto JSON of the engine's steps to this file at exit");
    cmd->add_option("--swa-replay-tokens", c.model.swa_replay_tokens,
                    "DeepSeek-V4.1: layers after the last KV source prefill only the last N prompt tokens (0 = off)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--block-size", c.cache.block_size, "compressed entries per cache block (prefixes are cached in "
                                                         "spans of block size x the largest compression rate)")
        ->check(CLI::PositiveNumber);
    add_prefix_cache_options(cmd, f);
    cmd->add_option("--mask-threads", c.structured.mask_threads, "threads computing structured-output token masks "
                                                                 "(default: a quarter of the cores, 1 to 8)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--grammar-cache", c.structured.compile_cache, "compiled structured-output grammars kept, by their text")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--mask-deadline-ms", c.structured.mask_deadline_ms,
                    "how long a step waits past its logits for late token masks (their sequences sit out meanwhile)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--rollback-tokens", c.model.rollback_tokens,
                    "tokens a step may later roll back; --swa-replay-tokens must cover the window plus these")
        ->check(CLI::NonNegativeNumber);
    add_speculative_options(cmd, c.speculative);
}

EngineConfig finish_engine_config(EngineFlags& f, const std::string& log_level) {
    EngineConfig c = f.config;
    if (c.model.path.empty()) c.model.path = default_model_dir();
    DI_CHECK(std::filesystem::is_directory(c.model.path), "model directory {} does not exist", c.model.path);
    c.cache.memory_bytes = parse_bytes(f.cache_memory);
    c.scheduler.async_scheduling = !f.no_async;
    c.cache.prefix.enabled = f.prefix_cache;
    c.cache.prefix.host_bytes = f.host_cache_memory == "0" ? 0 : parse_bytes(f.host_cache_memory);
    c.cache.prefix.disk_bytes = parse_bytes(f.disk_cache_size);
    c.log_level = log_level;
    for (const std::string& knob : f.kernel_knobs) {
        std::string why;
        DI_CHECK(parse_kernel_knob(c.model.kernels, knob, &why), "--kernel: {}", why);
    }
    return c;
}

SamplingParams SamplingFlags::finish() const {
    SamplingParams p = params;
    if (seed >= 0) p.seed = static_cast<uint64_t>(seed);
    return p;
}

void add_sampling_options(CLI::App* cmd, SamplingFlags& flags) {
    SamplingParams& p = flags.params;
    cmd->add_option("--max-tokens", p.max_tokens, "tokens to generate at most")->check(CLI::PositiveNumber);
    cmd->add_option("--temperature", p.temperature, "0 = greedy");
    cmd->add_option("--top-p", p.top_p);
    cmd->add_option("--top-k", p.top_k);
    cmd->add_option("--min-p", p.min_p);
    cmd->add_option("--presence-penalty", p.presence_penalty);
    cmd->add_option("--frequency-penalty", p.frequency_penalty);
    cmd->add_option("--repetition-penalty", p.repetition_penalty);
    cmd->add_option("--seed", flags.seed, "sampling seed (samples depend only on seed and position)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--stop", p.stop, "stop string (repeatable)");
    cmd->add_option("--n", p.n, "completions per prompt");
    cmd->add_option("--logprobs", p.logprobs, "log-probabilities of the chosen token and the top N");
    cmd->add_flag("--ignore-eos", p.ignore_eos, "keep generating past end-of-sequence tokens");
}

}  // namespace deepinfer::apps

namespace deepinfer::apps {

void add_grammar_options(CLI::App* cmd, GrammarFlags& f) {
    auto* schema = cmd->add_option("--json-schema", f.json_schema_file, "constrain the output to JSON valid under this JSON Schema file")
                       ->check(CLI::ExistingFile);
    auto* regex = cmd->add_option("--regex", f.regex, "constrain the output to match this regular expression (whole)");
    auto* ebnf = cmd->add_option("--grammar", f.grammar_file, "constrain the output to this EBNF grammar file (start rule root)")
                     ->check(CLI::ExistingFile);
    schema->excludes(regex)->excludes(ebnf);
    regex->excludes(ebnf);
    cmd->add_flag("--json-whitespace", f.flexible_whitespace, "with --json-schema: allow whitespace between JSON tokens");
}

GrammarSpec GrammarFlags::finish() const {
    auto read = [](const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        DI_CHECK(in.good(), "cannot read {}", path);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    GrammarSpec g;
    g.flexible_whitespace = flexible_whitespace;
    if (!json_schema_file.empty()) g.kind = GrammarSpec::Kind::kJsonSchema, g.text = read(json_schema_file);
    else if (!regex.empty()) g.kind = GrammarSpec::Kind::kRegex, g.text = regex;
    else if (!grammar_file.empty()) g.kind = GrammarSpec::Kind::kEbnf, g.text = read(grammar_file);
    return g;
}

}  // namespace deepinfer::apps
