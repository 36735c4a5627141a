#pragma once
// The offline engine: continuous batching over one model. submit() returns a stream of events
// per request; the engine thread runs the model while callers read. Thread-safe.
//
//   auto engine = deepinfer::Engine::create(config);
//   auto stream = engine->submit({.prompt = "def fib(n):", .sampling = {.temperature = 0}});
//   while (auto ev = stream->next()) { ... ev->sequences[0].text ... }
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepinfer/config.h"
#include "deepinfer/prefix_spans.h"
#include "deepinfer/request.h"

namespace deepinfer {

class RequestStream {
public:
    virtual ~RequestStream() = default;
    virtual RequestId id() const = 0;
    // The next event; nullopt once the request has finished and every event was read. With a
    // timeout, an empty RequestEvent (no sequences) means "nothing yet".
    virtual std::optional<RequestEvent> next() = 0;
    virtual std::optional<RequestEvent> next_for(std::chrono::milliseconds timeout) = 0;
    // Stops generation and frees the request's cache; a final kCancelled event follows.
    virtual void cancel() = 0;
    // Event-driven readers: `listener` runs whenever an event arrives (at once if some are
    // waiting already). It runs on the engine's thread, so it must only hand the news on (e.g.
    // post to an I/O loop); reading the stream inside it would deadlock.
    virtual void set_listener(std::function<void()> listener) = 0;
};

// One tier of the prefix cache: "device" (the cache pool), "host" (DRAM), "disk", "remote".
struct PrefixCacheTierStats {
    std::string tier;
    int64_t hit_spans = 0;    // cached spans that admitted sequences took from this tier
    int64_t hit_tokens = 0;   // prompt tokens those spans spared (not computed)
    int64_t entries = 0, bytes = 0, capacity_bytes = 0;  // held now (-1: the tier cannot tell)
    // Read-back: bytes_read / read_seconds is the tier's read bandwidth as the cache saw it.
    int64_t reads = 0, bytes_read = 0;
    double read_seconds = 0;
    int64_t writes = 0, bytes_written = 0, dropped_writes = 0;
    double write_seconds = 0;
    int64_t evictions = 0;
    int64_t errors = 0;  // unusable entries (corrupt, truncated), failed I/O, an unreachable store
};

struct PrefixCacheStats {
    bool enabled = false;
    int64_t span_tokens = 0;    // prefixes are cached in multiples of this many tokens
    int64_t replay_tokens = 0;  // positions recomputed after a hit to refill the window rings
    int64_t lookup_tokens = 0;  // prompt tokens of admitted sequences (hit rate = hit_tokens / this)
    int64_t hit_tokens = 0;     // of those, taken from the cache (all tiers)
    // Prefill/decode disaggregation: spans handed to sinks, and spans taken in from other engines
    // (rejected: failed their checks, or no host slot / parent span to hold them).
    int64_t exported_spans = 0, imported_spans = 0, rejected_imports = 0;
    std::vector<PrefixCacheTierStats> tiers;  // device, then host, disk, remote where enabled
};

// Speculative decoding: verified chunks (a sequence's last token plus its drafts), the drafts
// they carried and those kept; per draft position i, drafts proposed there and kept there.
// Mean tokens per verification (the sampled token included) = (accepted + verifications) /
// verifications.
struct SpeculativeStats {
    int64_t verifications = 0, draft_tokens = 0, accepted_tokens = 0;
    std::vector<int64_t> proposed_at, accepted_at;
};

struct EngineStats {
    int64_t requests_waiting = 0, requests_running = 0, requests_finished = 0;
    int64_t prompt_tokens = 0, generated_tokens = 0, preemptions = 0, steps = 0;
    int64_t prefix_tokens_reused = 0;  // prompt positions taken from the prefix cache (= prefix_cache.hit_tokens)
    PrefixCacheStats prefix_cache;
    double cache_usage = 0;  // fraction of cache blocks / sequence slots in use
    int64_t cache_bytes = 0;
    std::vector<std::pair<std::string, int64_t>> cache_bytes_by_kind;  // rings, carries, entries per group
    // Structured output: token masks computed, and of those the ones a step's deadline passed
    // (their sequences sat out steps until the mask was done).
    int64_t grammar_masks = 0, grammar_late_masks = 0;
    SpeculativeStats speculative;
};

class Engine {
public:
    // Loads the model and tokenizer and starts the engine thread. Throws deepinfer::Error for a
    // bad config or model directory.
    static std::unique_ptr<Engine> create(const EngineConfig& config);
    virtual ~Engine() = default;

    // Queues a request. A request that can never run (bad parameters, a prompt longer than the
    // cache or the model allows) produces a single error event instead.
    virtual std::shared_ptr<RequestStream> submit(GenerationRequest request) = 0;
    virtual EngineStats stats() const = 0;
    // Compiles a structured-output grammar (cached by its text, so the request that uses it next
    // finds it compiled); "" when it is usable, else the problem (an unsupported keyword, a regex
    // or EBNF syntax error with its position, a language with no string in it). Thread-safe.
    virtual std::string check_grammar(const GrammarSpec& grammar) = 0;
    virtual const std::string& model_name() const = 0;
    virtual int32_t vocab_size() const = 0;
    // Longest prompt + output a request may have: the model's max_position_embeddings, or less
    // when the config or the cache asks for less.
    virtual int64_t max_model_len() const = 0;
    // Whether requests may ask to be deterministic (GenerationRequest::deterministic): the
    // backend's kernels are batch-invariant.
    virtual bool deterministic_available() const = 0;
    // Tokenizer access for callers that format prompts (chat templates, counting).
    virtual std::vector<int32_t> tokenize(const std::string& text, bool add_special_tokens) const = 0;
    virtual std::string detokenize(const std::vector<int32_t>& tokens, bool skip_special_tokens) const = 0;
    // Prefill/decode disaggregation (decode side): takes spans another engine of the same model,
    // cache layout and device kind exported (prefix_spans.h; each prompt's spans in order) into
    // the prefix cache's host memory, ahead of every request submitted after this call. Returns
    // how many passed their checks (checksums, namespace, the key chain); the others are dropped
    // and logged. 0 without a prefix cache.
    virtual int import_prefix_spans(std::vector<std::vector<std::byte>> blobs) = 0;
    // Adds a span [begin, end) named `name` to the engine's trace (--trace) on a track of its
    // own, with numeric arguments; nothing when tracing is off.
    virtual void trace_span(const std::string& name, std::chrono::steady_clock::time_point begin,
                            std::chrono::steady_clock::time_point end, const std::vector<std::pair<std::string, double>>& args) = 0;
    // Finishes (or, with cancel_running, cancels) every request, then stops the engine thread.
    virtual void shutdown(bool cancel_running) = 0;
};

}  // namespace deepinfer
