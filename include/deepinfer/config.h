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

// Prefix caching: block-aligned prompt prefixes (compressed KV of every layer group and the
// compressor carries at the prefix's end) kept after requests finish, in tiers: the device cache
// pool, host memory, a local disk directory, a remote store shared by engines. A hit recomputes
// only the last ModelConfig::swa_replay_tokens positions to refill the sliding-window rings.
struct PrefixCacheConfig {
    bool enabled = true;
    int64_t host_bytes = 0;     // host (DRAM) tier; 0 = none (a small staging area when disk or remote is on)
    std::string disk_dir;       // disk tier directory (empty = none); entries survive restarts
    int64_t disk_bytes = 16LL << 30;  // disk tier size cap
    std::string remote_url;     // remote store, e.g. redis://127.0.0.1:6379 (empty = none)
    int remote_timeout_ms = 500;  // per remote operation (connect, get, set)
    int fetch_timeout_ms = 2000;  // a queued request waits at most this for its prefix read-back
};

struct CacheConfig {
    int max_sequences = 64;           // concurrent sequences (fixed per-sequence state slots)
    int64_t memory_bytes = 2LL << 30; // compressed-entry pools (+ rings and carries), in bytes
    int block_size = 64;              // compressed entries per block
    int max_model_len = 0;            // 0 = as many tokens as the cache can hold for one sequence
    PrefixCacheConfig prefix;
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
