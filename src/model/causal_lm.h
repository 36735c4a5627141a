#pragma once
// What the runtime needs from a model: a forward step over a flat batch of new tokens from many
// sequences, and a cache of per-sequence state with block-granular capacity. One implementation
// per architecture (archs/); load_causal_lm() picks it from config.json's model_type.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.h"
#include "model/draft_model.h"
#include "model/weight_quant.h"

namespace deepinfer::model {

// Copies of cached state that prefix caching (runtime/cache) queues with a step; the step's
// thread runs them before the forward, in the order of the fields: carries saved at a prefix
// boundary (before the sequence moves past it), evicted blocks copied out (before their blocks
// are reused), restored blocks copied in, carries restored into a sequence taking a prefix.
struct CacheTransfers {
    // A sequence's compressor carries at a block-aligned boundary <-> a snapshot slot.
    struct Carry {
        int state = 0;
        int64_t boundary = 0;
        int slot = 0;
    };
    // One block of a group (all layers), or with group kCarrySlot one carry snapshot slot, <->
    // host memory of PrefixGeometry's size for it.
    struct Host {
        int group = 0;
        int32_t index = 0;
        std::byte* host = nullptr;
    };
    static constexpr int kCarrySlot = -1;
    std::vector<Carry> carry_saves;
    std::vector<Host> to_host, to_device;
    std::vector<Carry> carry_restores;
    bool empty() const { return carry_saves.empty() && to_host.empty() && to_device.empty() && carry_restores.empty(); }
};

// One forward step: new tokens of several sequences, flattened.
struct Batch {
    std::vector<int32_t> token_ids;       // [N]
    std::vector<kernels::SeqSlice> seqs;  // state_idx = the sequence's cache slot
    std::vector<int32_t> logit_rows;      // rows of the batch whose logits are returned
    // [group][seq]: the sequences' block tables as of planning (SequenceCache::describe), so a
    // step can run while the planner reserves blocks for the next one. Empty: read the cache's.
    std::vector<std::vector<std::vector<int32_t>>> block_tables;
    // Per sequence: the length of the request's prompt (empty = unknown), for SWA bounded replay.
    std::vector<int64_t> prompt_lengths;
    // Per sequence: the tokens right before its first new one (most recent last; up to
    // kContextTokens), for n-gram lookups (Engram) that look behind the step.
    std::vector<std::vector<int32_t>> context_tokens;
    static constexpr int kContextTokens = 8;
    // Per sequence (empty = none): positions below this already have compressed state in the
    // cache (a shared prefix); their rows only rebuild window rings (encoder replay).
    std::vector<int64_t> compressed_until;
    // Prefix-cache copies the step runs before its forward (see CacheTransfers).
    CacheTransfers transfers;

    // Appends positions [start, start + count) of a sequence whose tokens so far are `tokens`
    // (its slice, ids and context); logit rows and prompt lengths are the caller's.
    // `window_from`: the sequence's rings hold nothing below this position.
    void append(std::span<const int32_t> tokens, int64_t start, int32_t count, int32_t state, int64_t window_from = 0) {
        int32_t begin = static_cast<int32_t>(token_ids.size());
        token_ids.insert(token_ids.end(), tokens.begin() + start, tokens.begin() + start + count);
        seqs.push_back({begin, count, start, state, window_from});
        int64_t from = std::max<int64_t>(0, start - kContextTokens);
        context_tokens.emplace_back(tokens.begin() + from, tokens.begin() + start);
    }

    // The sequences' block tables of one group, as spans.
    std::vector<std::span<const int32_t>> tables_of(int group) const {
        return {block_tables[group].begin(), block_tables[group].end()};
    }
};

struct CacheSizing {
    int max_seqs = 1;
    int block_size = 64;
    std::array<int64_t, 2> blocks{};  // blocks of the model's two block groups
    // Extra window-ring and compressor-carry rows per sequence: a step may write this many
    // positions that a later step takes back (speculative drafts) without overwriting rows the
    // kept positions still need.
    int ring_slack = 0;
    int64_t tokens_per_seq = 0;  // what each of max_seqs sequences can hold at once (informational)
};

class PrefixBlocks;

// Per-sequence cached state. Not thread-safe: the engine thread owns it.
class SequenceCache {
public:
    virtual ~SequenceCache() = default;
    // A free slot (empty state) or -1 when all are taken.
    virtual int try_add_sequence() = 0;
    virtual void remove_sequence(int state) = 0;
    // Room for positions [0, num_tokens); false, changing nothing, when a pool is short.
    virtual bool reserve(int state, int64_t num_tokens) = 0;
    // Copies the block tables of batch.seqs into batch.block_tables.
    virtual void describe(Batch& batch) const = 0;
    virtual int free_sequences() const = 0;
    virtual int max_seqs() const = 0;
    // Fraction of the scarcest resource (slots or blocks of any group) in use.
    virtual double usage() const = 0;
    virtual int64_t bytes() const = 0;
    // bytes() split by kind of state (e.g. sliding-window rings, compressed entries per group).
    virtual std::vector<std::pair<std::string, int64_t>> bytes_by_kind() const = 0;
    // Tokens one sequence could hold with the whole pool to itself.
    virtual int64_t token_capacity() const = 0;
    // Block-level access for prefix caching; null when the cache has no shareable blocks.
    virtual PrefixBlocks* prefix_blocks() { return nullptr; }
};

// The shape of what a cached prefix holds: every block group's blocks of block-aligned token
// spans, and the compressor carries at a span's end.
struct PrefixGeometry {
    int64_t span_tokens = 0;                 // prefixes are multiples of this (0 = none can be kept)
    std::array<int64_t, 2> blocks_per_span{};  // per block group
    std::array<int64_t, 2> block_bytes{};      // one block of a group, all its layers
    int64_t carry_bytes = 0;  // one carry snapshot (0: nothing is carried across a boundary)
    // A step may end this many positions past a boundary and still save the carries at it
    // (the carry rings still hold the rows); large when carry_bytes is 0.
    int64_t carry_slack = 0;
    int carry_slots = 0;  // snapshot slots on the device
};

// What the copies of CacheTransfers moved so far, and the time they took (with waiting for a
// device's transfer queue).
struct TransferTotals {
    int64_t copies_to_host = 0, bytes_to_host = 0, copies_to_device = 0, bytes_to_device = 0;
    double seconds_to_host = 0, seconds_to_device = 0;
};

// What prefix caching needs from a cache of compressed entries: block-aligned prefixes shared by
// reference count (entries are append-only, so a full block is never written again), carry
// snapshots, and copies of both to and from host memory (CacheTransfers).
class PrefixBlocks {
public:
    virtual ~PrefixBlocks() = default;
    virtual const PrefixGeometry& prefix_geometry() const = 0;
    virtual std::span<const int32_t> blocks_of(int state, int group) const = 0;
    virtual void retain_block(int group, int32_t block) = 0;
    // Drops a reference; the block is free again after the last.
    virtual void release_block(int group, int32_t block) = 0;
    virtual int block_refs(int group, int32_t block) const = 0;
    virtual int64_t free_block_count(int group) const = 0;
    // `n` free blocks with one reference each; false, taking none, when the pool is short.
    virtual bool allocate_blocks(int group, int64_t n, std::vector<int32_t>& out) = 0;
    // Appends `blocks` (one more reference each) to the table of `state`, which must be empty.
    virtual void adopt_blocks(int state, int group, std::span<const int32_t> blocks) = 0;
    // Runs the copies on the thread that runs steps.
    virtual void run_transfers(const CacheTransfers& t) = 0;
    virtual TransferTotals transfer_totals() const = 0;
};

class CausalLm {
public:
    virtual ~CausalLm() = default;
    virtual int64_t vocab_size() const = 0;
    virtual const std::vector<int>& eos_token_ids() const = 0;
    // Longest sequence the model's positions (RoPE and its scaling) were configured for.
    virtual int64_t max_position_embeddings() const = 0;
    virtual kernels::Backend& backend() = 0;
    // The speculative draft model loaded with LoadOptions::draft (null: none), and what the last
    // step computed for it.
    virtual DraftModel* draft_model() { return nullptr; }
    virtual std::string_view draft_kind() const { return ""; }  // "dspark", "mtp"
    virtual StepFeatures step_features() const { return {}; }
    // Sizing that fits `memory_bytes` for `max_seqs` concurrent sequences, with `ring_slack`
    // (CacheSizing) rows for positions a step may roll back.
    virtual CacheSizing plan_cache(int max_seqs, int64_t memory_bytes, int block_size, int ring_slack = 0) const = 0;
    // Sizing with room for `max_seqs` sequences of `max_tokens` tokens each.
    virtual CacheSizing plan_cache_for_tokens(int max_seqs, int64_t max_tokens, int block_size = 64) const = 0;
    virtual std::unique_ptr<SequenceCache> make_cache(const CacheSizing& sizing) = 0;
    // Runs the batch and appends its tokens to the cache (reserved in advance). Returns fp32
    // logits [logit_rows, vocab] on the backend's device.
    virtual Tensor forward(const Batch& batch, SequenceCache& cache) = 0;
    // SWA bounded replay (DeepSeek-V4.1): prefill runs the layers after the last KV source only
    // on the last `tokens` prompt tokens (0 = off). Throws deepinfer::Error when `tokens` does
    // not cover the sliding window plus `rollback` (tokens a later step may roll back). Returns
    // false where the architecture has nothing to replay (the setting is then unused).
    virtual bool configure_swa_replay(int tokens, int rollback) {
        (void)tokens, (void)rollback;
        return false;
    }
    // Whether forward() rebuilds window rings over a shared compressed prefix
    // (Batch::compressed_until): what prefix caching needs.
    virtual bool rebuilds_windows() const { return false; }
    // The sliding window the replay after a prefix hit must cover (0 = none).
    virtual int sliding_window() const { return 0; }
    // The replay after a prefix hit that rebuilds every window ring bit for bit: a layer's ring
    // depends on the layer below over window - 1 earlier positions, so layers x (window - 1) + 1.
    virtual int exact_replay_tokens() const { return 0; }
};

// Loads the model in `dir` (config.json model_type decides the architecture).
std::unique_ptr<CausalLm> load_causal_lm(const std::string& dir, kernels::Backend& backend,
                                         LoadOptions options = {});

}  // namespace deepinfer::model
