#pragma once
// The engine configuration tree: one aggregate of per-component sections, built by the app
// (CLI flags) and handed down section by section. Defaults are usable as they are.
#include <cstdint>
#include <string>

namespace deepinfer {

struct ModelConfig {
    std::string path;            // HF model directory (config.json, safetensors, tokenizer.json)
    std::string tokenizer_path;  // defaults to `path`
    std::string name;            // served model name; defaults to the directory name
    int threads = 0;             // CPU threads; 0 = all
    std::string device = "cpu";  // "cpu", "cuda" or "cuda:N"
    // DeepSeek-V4.1 SWA bounded replay: layers after the last KV source prefill only the last
    // this many prompt tokens (0 = off); must be >= sliding window + rollback_tokens.
    int swa_replay_tokens = 140;
    int rollback_tokens = 0;  // tokens a step may later take back (speculative drafts)
};

struct CacheConfig {
    int max_sequences = 64;           // concurrent sequences (fixed per-sequence state slots)
    int64_t memory_bytes = 2LL << 30; // compressed-entry pools (+ rings and carries), in bytes
    int block_size = 64;              // compressed entries per block
    int max_model_len = 0;            // 0 = as many tokens as the cache can hold for one sequence
    // Share block-aligned prompt prefixes with resident sequences (models that rebuild window
    // rings over a shared prefix, i.e. DeepSeek-V4.1 with swa_replay_tokens > 0).
    bool prefix_sharing = true;
};

struct SchedulerConfig {
    int max_batch_tokens = 512;  // token budget per step (decode tokens + prefill chunks)
    int max_running = 64;        // sequences decoded together
    bool async_scheduling = true;  // prepare step N+1 while step N runs
};

struct ServerConfig {
    std::string host = "127.0.0.1";
    int port = 8000;
    int max_connections = 512;         // concurrent HTTP connections (one thread each)
    double shutdown_grace_s = 30.0;    // on SIGTERM, how long in-flight requests may finish
    std::string api_key;               // when set, requests need "Authorization: Bearer <key>"
};

struct EngineConfig {
    ModelConfig model;
    CacheConfig cache;
    SchedulerConfig scheduler;
    std::string log_level = "warn";
};

}  // namespace deepinfer
