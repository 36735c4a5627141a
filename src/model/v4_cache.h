#pragma once
// Cached state of DeepSeek-V4 sequences (ARCHITECTURE.md §5).
//
// Per sequence ("state slot", fixed size): one sliding-window ring per layer (window + slack
// slots) and, per compressor, a carry ring of raw projections of the last window(s).
// Per sequence, growing: compressed entries in fixed-size blocks. All layers with the same
// compress rate append entries at the same pace, so they share one block table per rate group
// (CSA, HCA); each layer stream has its own pool indexed by the shared block ids. Blocks are
// reserved before a step; a pool without room refuses the reservation and changes nothing.
//
// Not thread-safe: one owner (the model runner) drives it.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "model/deepseek_v4_config.h"

namespace deepinfer::model {

// Enough blocks for `max_seqs` sequences of `max_tokens` tokens each.
CacheSizing v4_cache_for_tokens(const DeepseekV4Config& c, int max_seqs, int64_t max_tokens, int block_size = 64);
// The largest cache that fits `memory_bytes` (rings, carries and entry pools) and lets each of
// `max_seqs` sequences hold the same number of tokens (sizing.tokens_per_seq).
CacheSizing v4_cache_for_memory(const DeepseekV4Config& c, int max_seqs, int64_t memory_bytes, int block_size);
int64_t v4_cache_bytes(const DeepseekV4Config& c, const CacheSizing& s);

class V4Cache final : public SequenceCache {
public:
    enum class Group { kCsa = 0, kHca = 1 };

    struct LayerState {
        Tensor ring;                 // [max_seqs, ring_slots, head_dim]
        Tensor carry, index_carry;   // compressor carries (CSA/HCA; indexer for CSA)
        Tensor entries, index_entries;  // [blocks, block_size, dim] pools
    };

    V4Cache(const DeepseekV4Config& cfg, kernels::Backend& backend, const CacheSizing& sizing);

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

    LayerState& layer(int l) { return layers_[l]; }
    int ring_slots() const { return ring_slots_; }
    std::span<const int32_t> block_table(Group g, int state) const { return tables_[static_cast<int>(g)][state]; }
    int64_t free_blocks(Group g) const { return static_cast<int64_t>(free_[static_cast<int>(g)].size()); }
    int free_sequences() const override { return static_cast<int>(free_states_.size()); }
    int max_seqs() const override { return sizing_.max_seqs; }
    double usage() const override;
    int64_t bytes() const override { return bytes_; }
    std::vector<std::pair<std::string, int64_t>> bytes_by_kind() const override;
    int64_t token_capacity() const override;
    const CacheSizing& sizing() const { return sizing_; }
    // Bytes of entry pools per block of each group, over all layers (for memory accounting).
    int64_t bytes_per_block(Group g) const;

private:
    int64_t blocks_needed(Group g, int64_t num_tokens) const;
    int rate(Group g) const { return g == Group::kCsa ? cfg_.compress_rate_csa : cfg_.compress_rate_hca; }

    DeepseekV4Config cfg_;
    CacheSizing sizing_;
    int64_t bytes_ = 0;
    int ring_slots_ = 0;
    std::vector<LayerState> layers_;
    std::vector<std::vector<int32_t>> free_;                // per group: free block ids
    std::vector<std::vector<std::vector<int32_t>>> tables_;  // per group, per state: block ids
    std::vector<int> free_states_;
    bool has_group_[2] = {false, false};  // the model has layers of this rate group
};

}  // namespace deepinfer::model
