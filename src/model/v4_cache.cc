#include "model/v4_cache.h"

#include <algorithm>

#include "base/error.h"

namespace deepinfer::model {

namespace {

bool has_layer(const DeepseekV4Config& c, AttentionType type) {
    return std::find(c.layer_types.begin(), c.layer_types.end(), type) != c.layer_types.end();
}

// Bytes of one sequence's fixed state: rings and compressor carries.
int64_t fixed_bytes_per_sequence(const DeepseekV4Config& c, int ring_slack) {
    int64_t ring = std::max(1, c.sliding_window - 1 + ring_slack), d = c.head_dim, di = c.index_head_dim, b = 0;
    for (auto t : c.layer_types) {
        b += ring * d;
        if (t == AttentionType::kCsa) b += 2 * c.compress_rate_csa * 4 * (d + di);
        if (t == AttentionType::kHca) b += c.compress_rate_hca * 2 * d;
    }
    return b * static_cast<int64_t>(sizeof(float));
}

// Bytes of compressed entries per token of context (all layers).
double entry_bytes_per_token(const DeepseekV4Config& c) {
    double b = 0;
    for (auto t : c.layer_types) {
        if (t == AttentionType::kCsa) b += static_cast<double>(c.head_dim + c.index_head_dim) / c.compress_rate_csa;
        if (t == AttentionType::kHca) b += static_cast<double>(c.head_dim) / c.compress_rate_hca;
    }
    return b * sizeof(float);
}

}  // namespace

// Bytes a cache of this sizing allocates.
int64_t v4_cache_bytes(const DeepseekV4Config& c, const CacheSizing& s) {
    int64_t per_block[2] = {0, 0};
    for (auto t : c.layer_types) {
        if (t == AttentionType::kCsa) per_block[0] += (c.head_dim + c.index_head_dim) * s.block_size;
        if (t == AttentionType::kHca) per_block[1] += c.head_dim * s.block_size;
    }
    return fixed_bytes_per_sequence(c, s.ring_slack) * s.max_seqs +
           (per_block[0] * s.blocks_csa + per_block[1] * s.blocks_hca) * static_cast<int64_t>(sizeof(float));
}

CacheSizing v4_cache_for_memory(const DeepseekV4Config& c, int max_seqs, int64_t memory_bytes, int block_size) {
    // The largest even share of tokens per sequence whose blocks (partial blocks included) fit.
    auto plan = [&](int64_t per_seq) { return v4_cache_for_tokens(c, max_seqs, per_seq, block_size); };
    DI_CHECK(v4_cache_bytes(c, plan(1)) <= memory_bytes,
             "cache: {} bytes do not even hold the per-sequence state of {} sequences ({} bytes)", memory_bytes, max_seqs,
             v4_cache_bytes(c, plan(1)));
    int64_t lo = 1, hi = INT64_C(1) << 40;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (v4_cache_bytes(c, plan(mid)) <= memory_bytes) lo = mid;
        else hi = mid - 1;
    }
    CacheSizing s = plan(lo);
    s.tokens_per_seq = lo;
    return s;
}

CacheSizing v4_cache_for_tokens(const DeepseekV4Config& c, int max_seqs, int64_t max_tokens, int block_size) {
    CacheSizing s;
    s.tokens_per_seq = max_tokens;
    s.max_seqs = max_seqs;
    s.block_size = block_size;
    auto blocks = [&](int rate) { return max_seqs * ((max_tokens / rate + block_size - 1) / block_size); };
    s.blocks_csa = has_layer(c, AttentionType::kCsa) ? blocks(c.compress_rate_csa) : 0;
    s.blocks_hca = has_layer(c, AttentionType::kHca) ? blocks(c.compress_rate_hca) : 0;
    return s;
}

V4Cache::V4Cache(const DeepseekV4Config& cfg, kernels::Backend& backend, const CacheSizing& sizing)
    : cfg_(cfg), sizing_(sizing), free_(2), tables_(2) {
    DI_CHECK(sizing.max_seqs > 0 && sizing.block_size > 0, "cache: max_seqs and block_size must be positive");
    ring_slots_ = std::max(1, cfg.sliding_window - 1 + sizing.ring_slack);
    int64_t n = sizing.max_seqs, d = cfg.head_dim, di = cfg.index_head_dim, bs = sizing.block_size;
    for (int l = 0; l < cfg.num_hidden_layers; ++l) {
        LayerState st;
        st.ring = backend.empty(DType::kF32, {n, ring_slots_, d});  // read only where written
        AttentionType t = cfg.layer_types[l];
        if (t == AttentionType::kCsa) {
            int r = cfg.compress_rate_csa;
            st.carry = backend.empty(DType::kF32, {n, 2 * r, 4 * d});
            st.index_carry = backend.empty(DType::kF32, {n, 2 * r, 4 * di});
            st.entries = backend.empty(DType::kF32, {sizing.blocks_csa, bs, d});
            st.index_entries = backend.empty(DType::kF32, {sizing.blocks_csa, bs, di});
        } else if (t == AttentionType::kHca) {
            st.carry = backend.empty(DType::kF32, {n, cfg.compress_rate_hca, 2 * d});
            st.entries = backend.empty(DType::kF32, {sizing.blocks_hca, bs, d});
        }
        layers_.push_back(std::move(st));
    }
    for (int g = 0; g < 2; ++g) {
        has_group_[g] = has_layer(cfg, g == 0 ? AttentionType::kCsa : AttentionType::kHca);
        int64_t blocks = g == 0 ? sizing.blocks_csa : sizing.blocks_hca;
        for (int64_t b = blocks - 1; b >= 0; --b) free_[g].push_back(static_cast<int32_t>(b));
        tables_[g].resize(n);
    }
    for (int s = sizing.max_seqs - 1; s >= 0; --s) free_states_.push_back(s);
    bytes_ = v4_cache_bytes(cfg, sizing);
}

int V4Cache::try_add_sequence() {
    if (free_states_.empty()) return -1;
    int s = free_states_.back();
    free_states_.pop_back();
    return s;
}

double V4Cache::usage() const {
    double u = 1.0 - static_cast<double>(free_states_.size()) / sizing_.max_seqs;
    for (int g = 0; g < 2; ++g) {
        int64_t total = g == 0 ? sizing_.blocks_csa : sizing_.blocks_hca;
        if (has_group_[g] && total > 0) u = std::max(u, 1.0 - static_cast<double>(free_[g].size()) / total);
    }
    return u;
}

int64_t V4Cache::token_capacity() const {
    int64_t cap = INT64_C(1) << 40;
    for (int g = 0; g < 2; ++g) {
        int64_t total = g == 0 ? sizing_.blocks_csa : sizing_.blocks_hca;
        if (has_group_[g]) cap = std::min(cap, total * sizing_.block_size * rate(static_cast<Group>(g)) + rate(static_cast<Group>(g)) - 1);
    }
    return cap;
}

int V4Cache::add_sequence() {
    int s = try_add_sequence();
    DI_CHECK(s >= 0, "cache: all {} sequence slots are in use", sizing_.max_seqs);
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

void V4Cache::describe(Batch& batch) const {
    batch.block_tables.assign(2, {});
    for (int g = 0; g < 2; ++g)
        for (const auto& s : batch.seqs) batch.block_tables[g].push_back(tables_[g][s.state_idx]);
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

std::vector<std::pair<std::string, int64_t>> V4Cache::bytes_by_kind() const {
    int64_t rings = 0, carries = 0;
    for (const auto& l : layers_) {
        rings += static_cast<int64_t>(l.ring.nbytes());
        carries += static_cast<int64_t>(l.carry.nbytes() + l.index_carry.nbytes());
    }
    return {{"swa_rings", rings},
            {"compressor_carries", carries},
            {"csa_entries", bytes_per_block(Group::kCsa) * sizing_.blocks_csa},
            {"hca_entries", bytes_per_block(Group::kHca) * sizing_.blocks_hca}};
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
