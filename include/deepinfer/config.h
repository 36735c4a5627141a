#pragma once
// The engine configuration tree: one aggregate of per-component sections, built by the app
// (CLI flags) and handed down section by section. Defaults are usable as they are.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/kernel_config.h"

namespace deepinfer {

namespace runtime {
class Drafter;  // runtime/speculative/drafter.h
}

struct ModelConfig {
    std::string path;            // HF model directory (config.json, safetensors, tokenizer.json)
    std::string tokenizer_path;  // defaults to `path`
    std::string name;            // served model name; defaults to the directory name
    int threads = 0;             // CPU threads; 0 = all
    std::string device = "cpu";  // "cpu", "cuda" or "cuda:N"
    // Weights re-encoded at load: "" / "none" keeps the checkpoint's formats; "q8" stores the
    // weights of linear layers as 8-bit blocks of 32 with a scale each (CPU only).
    std::string quantize;
    // Arithmetic of the matrix products: "exact" (fp32 activations' precision: parity tests),
    // "fast" (activations rounded to bf16 into bf16 dot products) or "auto" / "" (the
    // architecture's own choice: fp32 on the CPU, two bf16 parts on CUDA, fp32 for V4.1).
    std::string precision;
    // DeepSeek-V4.1 SWA bounded replay: layers after the last KV source prefill only the last
    // this many prompt tokens (0 = off); must be >= sliding window + rollback_tokens.
    int swa_replay_tokens = 140;
    int rollback_tokens = 0;  // tokens a step may later take back (speculative drafts)
    KernelConfig kernels;     // which kernels the device's backend launches (kernel_config.h)
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
    // Host slots kept whatever host_bytes says: spans on their way to or from another engine
    // (prefill/decode disaggregation) pass through them.
    int64_t staging_spans = 0;
};

struct CacheConfig {
    int max_sequences = 64;           // concurrent sequences (fixed per-sequence state slots)
    int64_t memory_bytes = 2LL << 30; // compressed-entry pools (+ rings and carries), in bytes
    int block_size = 64;              // compressed entries per block
    int max_model_len = 0;            // 0 = the model's max_position_embeddings (or what the cache holds, if less)
    PrefixCacheConfig prefix;
};

struct SchedulerConfig {
    int max_batch_tokens = 512;  // token budget per step (decode tokens + prefill chunks)
    // Most prompt tokens a newly admitted request takes in its first step (0 = half the budget),
    // so requests arriving together share the step.
    int max_prefill_chunk = 0;
    int max_running = 64;        // sequences decoded together
    bool async_scheduling = true;  // prepare step N+1 while step N runs
};

// The HTTP server. Every limit is answered with an OpenAI-style 4xx (or 503 / 429) and counted
// in /metrics under deepinfer_rejected_total{reason}.
struct ServerConfig {
    std::string host = "127.0.0.1";
    int port = 8000;
    int io_threads = 2;                  // event loop threads (connections cost no thread)
    int worker_threads = 2;              // parse and tokenize requests off the event loop
    int max_connections = 10000;         // at the limit the longest-idle one makes room; if all are busy, 503
    int64_t max_body_bytes = 32 << 20;   // 413
    int max_header_bytes = 64 << 10;     // request line + headers; 431
    int max_header_count = 100;          // 431
    double header_timeout_s = 10;        // a new connection's request head must arrive in time (408)
    double body_timeout_s = 60;          // then its body (408)
    double idle_timeout_s = 60;          // a kept-alive connection with no new request is closed
    double write_timeout_s = 30;         // a client that reads nothing of a reply for this long is dropped
    int max_json_depth = 64;             // nesting of the request body; 400
    int max_sequences_per_request = 256; // prompts x n (x best_of); 400
    int max_pending_requests = 4096;     // completion requests in flight; 429
    double shutdown_grace_s = 30.0;      // on SIGTERM, how long in-flight requests may finish
    std::string api_key;                 // when set, requests need "Authorization: Bearer <key>"
    // Prefill/decode disaggregation. "prefill" and "both" answer POST /internal/prefill (a
    // prompt's state for a decode instance); "decode" and "both" take a prompt's state from the
    // prefill instance a request names (header X-DeepInfer-Prefill: host:port, else
    // prefill_instance) and fall back to computing it locally when that fails.
    std::string role = "both";
    std::string prefill_instance;        // host:port ("" = only what requests name)
    double prefill_timeout_s = 120;      // the longest silence of a prefill instance before falling back
};

// Structured output (grammar-constrained decoding). Masks are computed on worker threads while
// the step runs; a row whose mask is not ready when the step's logits are, plus the deadline,
// waits out of the batch (its logits kept) until its mask is done, so a slow grammar delays only
// its own sequence.
struct StructuredOutputConfig {
    int mask_threads = 0;             // threads computing token masks; 0 = a quarter of the cores (1 to 8)
    double mask_deadline_ms = 1.0;    // how long a step waits past its logits for late masks
    int compile_cache = 256;          // compiled grammars kept, by their text
    int max_rollback_tokens = 16;     // accepted tokens a matcher can take back (speculative decoding)
    // For tests of the deadline: every Nth mask (0 = none) takes test_mask_delay_ms longer.
    int test_slow_mask_every = 0;
    double test_mask_delay_ms = 0;
};

// Speculative decoding: a drafter proposes up to num_draft_tokens tokens to follow a decoding
// sequence's last token, and one step of the model computes them all; the sequence keeps the
// drafts its own sampling confirms, position by position, plus the token sampled after the last
// kept one. Sampling is keyed by (seed, position), so the output is the one decoding without
// drafts gives, token for token, on batch-invariant kernels (the CPU, or --deterministic).
// Requests with repetition / presence / frequency penalties or a grammar decode without drafts.
struct SpeculativeConfig {
    // "" or "off"; "ngram": prompt lookup, drafts copied from where the sequence's last tokens
    // occurred before (no draft model); "dspark": the DSpark draft model a DeepSeek-V4.1
    // checkpoint carries (mtp.*), run after every step on the target's features, its confidence
    // head's estimates feeding the confidence scheduling. A dspark draft block holds
    // dspark_block_size - 1 tokens, so num_draft_tokens is capped there. "mtp": the MTP head of a
    // DeepSeek-V4 checkpoint (mtp.0), run num_draft_tokens times per draft on its own output.
    std::string method;
    int num_draft_tokens = 4;
    int ngram_min = 1, ngram_max = 3;  // lengths of the suffix matched, longest first
    // "confidence": each step verifies, per sequence, the drafts worth their cost (the chance they
    // are kept, from what was kept so far at each draft position, against the step time measured
    // per token count; DSpark's Algorithm 1). "fixed": every draft found, up to num_draft_tokens.
    std::string verify = "confidence";
    // A drafter of the caller's own (embedders, tests), used instead of `method`'s.
    std::shared_ptr<const runtime::Drafter> drafter;
    // Tests only: keep every draft without checking it (a broken acceptance rule).
    bool test_accept_unchecked = false;
    // Tests only: a draft model's draft lengths in turn instead of the planner's (-1: the draft
    // model rests, skipping the step's commits).
    std::vector<int> test_draft_lengths;
    bool enabled() const { return drafter || (!method.empty() && method != "off"); }
};

struct EngineConfig {
    ModelConfig model;
    CacheConfig cache;
    SchedulerConfig scheduler;
    StructuredOutputConfig structured;
    SpeculativeConfig speculative;
    std::string log_level = "warn";
    std::string trace_path;  // Chrome-trace / Perfetto JSON of the engine's steps, written at shutdown ("" = off)
    // Every request deterministic (GenerationRequest::deterministic); needs a batch-invariant
    // backend (the CPU).
    bool deterministic = false;
};

}  // namespace deepinfer
