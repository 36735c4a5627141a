#pragma once
// Prefix caching that outlives requests (ARCHITECTURE.md §5). Prompts are cut into block-aligned
// spans (aligned to every compression rate's block); a span is keyed by a hash chain over the
// tokens before and in it (prefix_key.h) and holds every layer group's compressed-KV blocks plus,
// at its end, the compressor carries. Sequences add the spans they complete; a sequence being
// admitted takes the longest cached prefix and recomputes only its last `replay_tokens`
// positions, which refills the sliding-window rings (those are never stored).
//
// Tiers, each written back to the next when an entry leaves it, least recently used leaf first:
// the device cache pool (blocks shared by reference count with running sequences), host memory
// (slots of a page-locked buffer), a disk directory and a remote store (blob_tier.h). Reads
// below host memory start when a request is queued (on_waiting) and land in host slots; the
// request is admitted once they are back (or failed, or timed out). Copies between the device and
// host memory run with the next step (model::CacheTransfers).
//
// Engine thread only (the disk and remote tiers have threads of their own).
#include <chrono>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "deepinfer/config.h"
#include "deepinfer/engine.h"
#include "deepinfer/prefix_spans.h"
#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "runtime/cache/blob_tier.h"
#include "runtime/cache/host_slots.h"
#include "runtime/cache/prefix_index.h"
#include "runtime/sequence.h"

namespace deepinfer::runtime {

// A seed that differs between models, cache layouts, devices and numerics (`numerics`: the
// weight quantization and precision the engine computes with; their cached numbers differ), so
// engines sharing a disk directory or a remote store only ever match their own entries.
uint64_t prefix_namespace(const std::string& model_dir, const std::string& device, const model::PrefixGeometry& g,
                          const std::string& numerics);

// Positions recomputed after a hit: `tokens` (the bounded replay), or `exact` (rebuilds every
// window ring bit for bit: CausalLm::exact_replay_tokens) for deterministic sequences.
struct PrefixReplay {
    int tokens = 0;
    int exact = 0;
};

class PrefixCache {
public:
    PrefixCache(const PrefixCacheConfig& config, PrefixReplay replay, uint64_t namespace_seed, model::PrefixBlocks& blocks,
                kernels::Backend& backend);
    ~PrefixCache();

    int64_t span_tokens() const { return geometry_.span_tokens; }

    // --- scheduler --------------------------------------------------------------------------
    // A sequence was queued: find its cached prefix and start reading spans held below host memory.
    void on_waiting(const Sequence& s);
    // Its read-back is done (or failed, or timed out): it can be admitted.
    bool ready(const Sequence& s) const;
    // Gives the fresh cache slot `state` the longest usable cached prefix of the sequence's
    // prompt and moves it to recompute only the positions the windows need.
    void take_prefix(Sequence& s, int state);
    // Undoes take_prefix for a sequence that could not be admitted after all.
    void untake_prefix(Sequence& s);
    void forget(const Sequence& s);
    // Frees the device blocks of one cached span nobody uses (written back first); false when
    // no span can go.
    bool evict_one();
    // A prefill chunk [start, start + count) shortened to end at a span boundary where the
    // carries would otherwise be lost before they are saved.
    int64_t chunk_count(const Sequence& s, int64_t start, int64_t count) const;

    // --- engine -----------------------------------------------------------------------------
    // After a step: the spans the sequence completed join the index.
    void on_computed(Sequence& s);
    // Copies to run with the next step; on_step_done() once it ran (ok = without failure).
    model::CacheTransfers take_transfers();
    void on_step_done(bool ok);
    // Results of reads below host memory.
    void poll();
    // Shutdown: every cached span not yet written below host memory is written to the disk and
    // remote tiers (when there are some), waiting at most `timeout_ms` for them.
    void write_back_all(int timeout_ms);
    PrefixCacheStats stats() const;
    // Copies queued for a step that has not been launched yet (run_pending_transfers() runs them
    // when no step is in flight and none is planned).
    bool has_pending_transfers() const { return !pending_.transfers.empty(); }
    void run_pending_transfers();

    // --- disaggregation (prefix_cache_transfer.cc) ------------------------------------------
    // Hands the prompt's spans to `sink`, in order, as they reach the index (computed by the
    // request, or found cached) and have a host copy. Returns the export's id.
    uint64_t start_export(std::span<const int32_t> prompt, std::shared_ptr<PrefixSpanSink> sink);
    // The request computing the export's spans finished: spans not indexed by now never come.
    void end_export_producer(uint64_t id);
    // Moves exports on: ready host copies go to their sinks, device spans get a host copy queued.
    void pump_exports();
    bool exporting() const { return !exports_.empty(); }
    // Shutdown: every export ends with what it handed out.
    void end_exports();
    // Any thread: empty when `blob` is a sealed span of this cache's namespace and layout whose key
    // matches its parent and tokens; else what is wrong with it.
    std::string check_import(std::span<const std::byte> blob) const;
    // A checked span joins the host tier (its parent must be in the index, or it starts a
    // prompt). False when it cannot be held.
    bool import_span(std::span<const std::byte> blob);

private:
    struct Lookup {
        std::vector<PrefixKey> keys;     // of the prompt's spans a hit may cover
        std::vector<PrefixKey> waiting;  // spans being read
        std::chrono::steady_clock::time_point deadline;
    };
    std::vector<PrefixKey> chain_keys(const Sequence& s) const;
    std::vector<PrefixKey> chain_keys(std::span<const int32_t> prompt) const;
    bool has_carries(const PrefixNode& n) const;
    bool usable(const PrefixNode& n) const;
    bool host_usable(const PrefixNode& n) const;
    bool unused(const PrefixNode& n) const;
    bool restore_to_device(PrefixNode& n);
    bool restore_carries(PrefixNode& n, int state, int64_t boundary);
    void adopt_chain(Sequence& s, int state, const std::vector<PrefixNode*>& chain);
    int usable_end(const std::vector<PrefixNode*>& chain, int64_t replay) const;
    void index_span(Sequence& s);
    void save_carries(PrefixNode& n, const Sequence& s);
    int acquire_carry_slot(const PrefixNode* keep);
    void release_device(PrefixNode& n);
    void copy_to_host(PrefixNode& n);
    int acquire_host_slot();
    void evict_host(PrefixNode& n);
    void write_below(PrefixNode& n);
    void start_read(PrefixNode& n, BlobTier& tier, uint64_t chain);
    void count_hit(const PrefixNode& n, int64_t tokens);

    PrefixCacheConfig config_;
    PrefixReplay replay_;
    int64_t replay_of(const Sequence& s) const;
    uint64_t namespace_;
    model::PrefixBlocks& blocks_;
    model::PrefixGeometry geometry_;
    BlobLayout layout_;
    PrefixIndex index_;
    std::unique_ptr<HostSlots> host_;
    std::unique_ptr<BlobTier> disk_, remote_;
    std::unordered_map<const Sequence*, Lookup> lookups_;
    std::unordered_map<uint64_t, PrefixKey> reads_;  // ticket -> span being read
    uint64_t next_ticket_ = 0, next_chain_ = 0;
    std::unordered_set<PrefixKey, PrefixKeyHash> taking_;  // spans take_prefix is assembling
    std::vector<int> free_carry_slots_;
    // Copies queued for the next step, and what to finish once it ran.
    struct Pending {
        model::CacheTransfers transfers;
        std::vector<PrefixKey> filled;       // host copies being made from the device
        std::vector<PrefixKey> pinned;       // host slots read by uploads
        std::vector<int> freed_carry_slots;  // reusable once the copies out of them ran
    };
    Pending pending_, inflight_;
    // Disaggregation: spans on their way out to sinks.
    struct Export {
        std::vector<PrefixKey> keys;  // the prompt's spans, in order
        size_t next = 0;              // the first not handed out yet
        std::shared_ptr<PrefixSpanSink> sink;
        bool producer_done = false;
        std::chrono::steady_clock::time_point stalled_since{};
    };
    bool pump_export(Export& e);  // true once the export is finished
    void emit_span(Export& e, const PrefixNode& n);
    std::map<uint64_t, Export> exports_;
    uint64_t next_export_ = 0;
    // Statistics.
    std::array<PrefixCacheTierStats, kPrefixTiers> tiers_;
    int64_t lookup_tokens_ = 0, hit_tokens_ = 0;
    int64_t exported_spans_ = 0, imported_spans_ = 0, rejected_imports_ = 0;
};

}  // namespace deepinfer::runtime
