#pragma once
// Cached state of hybrid-attention sequences (DeepSeek-V4 and V4.1; ARCHITECTURE.md §5).
//
// Per sequence ("state slot", fixed size): one sliding-window ring per layer (window - 1 + slack
// slots) and, per compressor, carry rows of raw projections of tokens not yet pooled.
// Per sequence, growing: compressed entries in fixed-size blocks. Layers whose entries grow at
// the same rate (entries per token) form a block group and share one block table per sequence;
// each layer's pool is indexed by the group's block ids. Blocks are reserved before a step; a
// pool without room refuses the reservation and changes nothing. Full blocks of a prefix can be
// shared between sequences (reference counted; entries are append-only, so shared blocks are
// never written again).
//
// The architecture describes what it caches with a CacheLayout; this class only manages memory.
// Not thread-safe: one owner (the model runner) drives it.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/causal_lm.h"

namespace deepinfer::model {

inline constexpr int kBlockGroups = 2;

struct CacheLayout {
    struct Layer {
        int group = -1;                  // block group of the entry pools; -1 = no compressed entries
        int64_t entry_dim = 0;           // width of the entry pool (0 = none)
        int64_t index_dim = 0;           // width of the indexer-key pool (0 = none)
        std::array<int64_t, 2> carry{};  // per-sequence carry [rows, cols] (zero = none)
        std::array<int64_t, 2> index_carry{};
        // Carry rows a sequence still needs at a boundary aligned to the rate: the positions
        // right before it (slot position % rows). A prefix hit restores them.
        int64_t boundary_carry_rows = 0, boundary_index_carry_rows = 0;
    };
    int window = 0;            // sliding window of every layer
    int64_t head_dim = 0;      // ring row width
    // Element type of the rings and entry pools: kF32, or kBF16 where the backend reads it
    // (kv_cache_dtype()); carries keep fp32.
    DType kv_dtype = DType::kF32;
    std::array<int, kBlockGroups> rates{};  // tokens per entry of each group (0 = group unused)
    std::array<std::string, kBlockGroups> group_names{"group0", "group1"};
    std::vector<Layer> layers;
};

// Enough blocks for `max_seqs` sequences of `max_tokens` tokens each.
CacheSizing cache_for_tokens(const CacheLayout& layout, int max_seqs, int64_t max_tokens, int block_size = 64);
// The largest cache that fits `memory_bytes` (rings, carries and entry pools) and lets each of
// `max_seqs` sequences hold the same number of tokens (sizing.tokens_per_seq).
CacheSizing cache_for_memory(const CacheLayout& layout, int max_seqs, int64_t memory_bytes, int block_size,
                             int ring_slack = 0);
int64_t cache_bytes(const CacheLayout& layout, const CacheSizing& s);
// Bytes of one block of a group's entry pools, over all its layers.
int64_t block_bytes(const CacheLayout& layout, int group, int block_size);
// Token spans whose ends leave every group's entries on a block boundary (0 = none).
int64_t prefix_span(const CacheLayout& layout, int block_size);
// Floats of the carries a sequence needs at a span boundary (all layers).
int64_t carry_snapshot_floats(const CacheLayout& layout);

// Carry snapshot slots of a cache (0 when the layout carries nothing across a boundary): one per
// prefix span the block pools can hold.
int64_t carry_snapshot_slots(const CacheLayout& layout, const CacheSizing& s);

class HybridCache final : public SequenceCache, public PrefixBlocks {
public:
    struct LayerState {
        Tensor ring;                    // [max_seqs, ring_slots, head_dim]
        Tensor carry, index_carry;      // [max_seqs, rows, cols] compressor carries
        Tensor entries, index_entries;  // [blocks, block_size, dim] pools
        // [snapshot slots, boundary rows, cols]: carries at a prefix boundary (prefix caching)
        Tensor carry_snapshots, index_carry_snapshots;
    };

    HybridCache(CacheLayout layout, kernels::Backend& backend, const CacheSizing& sizing);

    // A free state slot for a new sequence (its caches start empty); throws when none is free.
    int add_sequence();
    int try_add_sequence() override;
    void remove_sequence(int state) override;
    // Makes room for entries of positions [0, num_tokens); returns false (and changes nothing)
    // when a pool lacks free blocks.
    bool reserve(int state, int64_t num_tokens) override;
    void describe(Batch& batch) const override;
    // Drops blocks beyond what `num_tokens` positions need (after a rollback or truncation).
    void truncate(int state, int64_t num_tokens);
    // Prefixes that are multiples of this can be shared (0 = none): every group's entries end
    // on a block boundary there.
    int64_t prefix_alignment() const;
    PrefixBlocks* prefix_blocks() override { return prefix_.span_tokens > 0 ? this : nullptr; }

    // PrefixBlocks (hybrid_cache_prefix.cc).
    const PrefixGeometry& prefix_geometry() const override { return prefix_; }
    std::span<const int32_t> blocks_of(int state, int group) const override { return tables_[group][state]; }
    void retain_block(int group, int32_t block) override;
    void release_block(int group, int32_t block) override;
    int block_refs(int group, int32_t block) const override { return refs_[group][block]; }
    int64_t free_block_count(int group) const override { return free_blocks(group); }
    bool allocate_blocks(int group, int64_t n, std::vector<int32_t>& out) override;
    void adopt_blocks(int state, int group, std::span<const int32_t> blocks) override;
    void run_transfers(const CacheTransfers& t) override;
    TransferTotals transfer_totals() const override { return totals_; }

    LayerState& layer(int l) { return layers_[l]; }
    const CacheLayout& layout() const { return layout_; }
    int ring_slots() const { return ring_slots_; }
    std::span<const int32_t> block_table(int group, int state) const { return tables_[group][state]; }
    int64_t free_blocks(int group) const { return static_cast<int64_t>(free_[group].size()); }
    int free_sequences() const override { return static_cast<int>(free_states_.size()); }
    int max_seqs() const override { return sizing_.max_seqs; }
    double usage() const override;
    int64_t bytes() const override { return bytes_; }
    std::vector<std::pair<std::string, int64_t>> bytes_by_kind() const override;
    int64_t token_capacity() const override;
    const CacheSizing& sizing() const { return sizing_; }

private:
    int64_t blocks_needed(int group, int64_t num_tokens) const;
    bool used(int group) const { return layout_.rates[group] > 0; }
    PrefixGeometry plan_prefix_geometry() const;
    void copy_carries(const CacheTransfers::Carry& c, bool save);
    std::vector<kernels::HostTransfer> host_regions(const CacheTransfers::Host& h);

    kernels::Backend& backend_;
    CacheLayout layout_;
    PrefixGeometry prefix_;
    TransferTotals totals_;
    CacheSizing sizing_;
    int64_t bytes_ = 0;
    int ring_slots_ = 0;
    std::vector<LayerState> layers_;
    std::array<std::vector<int32_t>, kBlockGroups> free_;                // free block ids
    std::array<std::vector<int32_t>, kBlockGroups> refs_;                // per block: tables holding it
    std::array<std::vector<std::vector<int32_t>>, kBlockGroups> tables_;  // per state: block ids
    std::vector<int> free_states_;
};

}  // namespace deepinfer::model
