#include "model/v4_cache.h"

#include <algorithm>

#include "base/error.h"

namespace deepinfer::model {

V4CacheSizing V4CacheSizing::for_tokens(const DeepseekV4Config& c, int max_seqs, int64_t max_tokens, int block_size) {
    V4CacheSizing s;
    s.max_seqs = max_seqs;
    s.block_size = block_size;
    auto blocks = [&](int rate) { return max_seqs * ((max_tokens / rate + block_size - 1) / block_size); };
    bool has_csa = false, has_hca = false;
    for (auto t : c.layer_types) {
        has_csa |= t == AttentionType::kCsa;
        has_hca |= t == AttentionType::kHca;
    }
    s.blocks_csa = has_csa ? blocks(c.compress_rate_csa) : 0;
    s.blocks_hca = has_hca ? blocks(c.compress_rate_hca) : 0;
    return s;
}

V4Cache::V4Cache(const DeepseekV4Config& cfg, kernels::Backend& backend, const V4CacheSizing& sizing)
    : cfg_(cfg), sizing_(sizing), free_(2), tables_(2) {
    DI_CHECK(sizing.max_seqs > 0 && sizing.block_size > 0, "cache: max_seqs and block_size must be positive");
    ring_slots_ = std::max(1, cfg.sliding_window - 1 + sizing.ring_slack);
    int64_t n = sizing.max_seqs, d = cfg.head_dim, di = cfg.index_head_dim, bs = sizing.block_size;
    for (int l = 0; l < cfg.num_hidden_layers; ++l) {
        LayerState st;
        st.ring = backend.zeros(DType::kF32, {n, ring_slots_, d});
        AttentionType t = cfg.layer_types[l];
        if (t == AttentionType::kCsa) {
            int r = cfg.compress_rate_csa;
            st.carry = backend.zeros(DType::kF32, {n, 2 * r, 4 * d});
            st.index_carry = backend.zeros(DType::kF32, {n, 2 * r, 4 * di});
            st.entries = backend.zeros(DType::kF32, {sizing.blocks_csa, bs, d});
            st.index_entries = backend.zeros(DType::kF32, {sizing.blocks_csa, bs, di});
        } else if (t == AttentionType::kHca) {
            st.carry = backend.zeros(DType::kF32, {n, cfg.compress_rate_hca, 2 * d});
            st.entries = backend.zeros(DType::kF32, {sizing.blocks_hca, bs, d});
        }
        layers_.push_back(std::move(st));
    }
    for (int g = 0; g < 2; ++g) {
        AttentionType type = g == 0 ? AttentionType::kCsa : AttentionType::kHca;
        has_group_[g] = std::find(cfg.layer_types.begin(), cfg.layer_types.end(), type) != cfg.layer_types.end();
        int64_t blocks = g == 0 ? sizing.blocks_csa : sizing.blocks_hca;
        for (int64_t b = blocks - 1; b >= 0; --b) free_[g].push_back(static_cast<int32_t>(b));
        tables_[g].resize(n);
    }
    for (int s = sizing.max_seqs - 1; s >= 0; --s) free_states_.push_back(s);
}

int V4Cache::add_sequence() {
    DI_CHECK(!free_states_.empty(), "cache: all {} sequence slots are in use", sizing_.max_seqs);
    int s = free_states_.back();
    free_states_.pop_back();
    return s;
}

void V4Cache::remove_sequence(int state) {
    truncate(state, 0);
    free_states_.push_back(state);
}

int64_t V4Cache::blocks_needed(Group g, int64_t num_tokens) const {
    int64_t entries = num_tokens / rate(g);
    return (entries + sizing_.block_size - 1) / sizing_.block_size;
}

bool V4Cache::reserve(int state, int64_t num_tokens) {
    int64_t missing[2];
    for (int g = 0; g < 2; ++g) {
        int64_t need = has_group_[g] ? blocks_needed(static_cast<Group>(g), num_tokens) : 0;
        missing[g] = std::max<int64_t>(0, need - static_cast<int64_t>(tables_[g][state].size()));
        if (missing[g] > static_cast<int64_t>(free_[g].size())) return false;
    }
    for (int g = 0; g < 2; ++g)
        for (int64_t i = 0; i < missing[g]; ++i) {
            tables_[g][state].push_back(free_[g].back());
            free_[g].pop_back();
        }
    return true;
}

void V4Cache::truncate(int state, int64_t num_tokens) {
    for (int g = 0; g < 2; ++g) {
        auto& table = tables_[g][state];
        int64_t keep = blocks_needed(static_cast<Group>(g), num_tokens);
        while (static_cast<int64_t>(table.size()) > keep) {
            free_[g].push_back(table.back());
            table.pop_back();
        }
    }
}

int64_t V4Cache::bytes_per_block(Group g) const {
    int64_t per_entry = 0;
    for (auto t : cfg_.layer_types) {
        if (g == Group::kCsa && t == AttentionType::kCsa) per_entry += cfg_.head_dim + cfg_.index_head_dim;
        if (g == Group::kHca && t == AttentionType::kHca) per_entry += cfg_.head_dim;
    }
    return per_entry * sizing_.block_size * static_cast<int64_t>(sizeof(float));
}

}  // namespace deepinfer::model
