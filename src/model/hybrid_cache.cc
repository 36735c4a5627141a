#include "model/hybrid_cache.h"

#include <algorithm>

#include "base/error.h"

namespace deepinfer::model {

namespace {

int slots_for(const CacheLayout& c, int slack) { return std::max(1, c.window - 1 + slack); }

int64_t kv_bytes(const CacheLayout& c) { return static_cast<int64_t>(dtype_size(c.kv_dtype)); }

// Carry rows of a compressor: its windows' rows plus the slack a rolled-back step may overwrite.
int64_t carry_rows(int64_t rows, int slack) { return rows > 0 ? rows + slack : 0; }

// Bytes of one sequence's fixed state: rings and compressor carries (fp32).
int64_t fixed_bytes_per_sequence(const CacheLayout& c, int ring_slack) {
    int64_t ring = 0, carry = 0;
    for (const auto& l : c.layers) {
        ring += slots_for(c, ring_slack) * c.head_dim;
        carry += carry_rows(l.carry[0], ring_slack) * l.carry[1] + carry_rows(l.index_carry[0], ring_slack) * l.index_carry[1];
    }
    return ring * kv_bytes(c) + carry * int64_t{sizeof(float)};
}

}  // namespace

int64_t carry_snapshot_floats(const CacheLayout& c) {
    int64_t f = 0;
    for (const auto& l : c.layers) f += l.boundary_carry_rows * l.carry[1] + l.boundary_index_carry_rows * l.index_carry[1];
    return f;
}

int64_t prefix_span(const CacheLayout& c, int block_size) {
    int64_t align = 0;
    for (int g = 0; g < kBlockGroups; ++g)
        if (c.rates[g] > 0) align = std::max<int64_t>(align, static_cast<int64_t>(c.rates[g]) * block_size);
    for (int g = 0; g < kBlockGroups; ++g)  // every group's entries must end on a block boundary
        if (c.rates[g] > 0 && align % (static_cast<int64_t>(c.rates[g]) * block_size) != 0) return 0;
    return align;
}

int64_t block_bytes(const CacheLayout& c, int group, int block_size) {
    int64_t per_entry = 0;
    for (const auto& l : c.layers)
        if (l.group == group) per_entry += l.entry_dim + l.index_dim;
    return per_entry * block_size * kv_bytes(c);
}

int64_t cache_bytes(const CacheLayout& c, const CacheSizing& s) {
    int64_t bytes = fixed_bytes_per_sequence(c, s.ring_slack) * s.max_seqs;
    for (int g = 0; g < kBlockGroups; ++g) bytes += block_bytes(c, g, s.block_size) * s.blocks[g];
    return bytes + carry_snapshot_slots(c, s) * carry_snapshot_floats(c) * int64_t{sizeof(float)};
}

int64_t carry_snapshot_slots(const CacheLayout& c, const CacheSizing& s) {
    int64_t span = prefix_span(c, s.block_size);
    if (span == 0 || carry_snapshot_floats(c) == 0) return 0;
    int64_t spans = INT64_C(1) << 40;
    for (int g = 0; g < kBlockGroups; ++g)
        if (c.rates[g] > 0) spans = std::min(spans, s.blocks[g] / (span / c.rates[g] / s.block_size));
    // One per span the pools hold: a span that lost its carries cannot end a hit, on the device
    // or in a tier below (they are small next to a span's blocks: ~1% at V4-Flash's sizes).
    return std::max<int64_t>(1, spans);
}

CacheSizing cache_for_memory(const CacheLayout& c, int max_seqs, int64_t memory_bytes, int block_size, int ring_slack) {
    // The largest even share of tokens per sequence whose blocks (partial blocks included) fit.
    auto plan = [&](int64_t per_seq) {
        CacheSizing s = cache_for_tokens(c, max_seqs, per_seq, block_size);
        s.ring_slack = ring_slack;
        return s;
    };
    DI_CHECK(cache_bytes(c, plan(1)) <= memory_bytes,
             "cache: {} bytes do not even hold the per-sequence state of {} sequences ({} bytes)", memory_bytes, max_seqs,
             cache_bytes(c, plan(1)));
    int64_t lo = 1, hi = INT64_C(1) << 40;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (cache_bytes(c, plan(mid)) <= memory_bytes) lo = mid;
        else hi = mid - 1;
    }
    CacheSizing s = plan(lo);
    s.tokens_per_seq = lo;
    return s;
}

CacheSizing cache_for_tokens(const CacheLayout& c, int max_seqs, int64_t max_tokens, int block_size) {
    CacheSizing s;
    s.tokens_per_seq = max_tokens;
    s.max_seqs = max_seqs;
    s.block_size = block_size;
    for (int g = 0; g < kBlockGroups; ++g)
        if (c.rates[g] > 0) s.blocks[g] = max_seqs * ((max_tokens / c.rates[g] + block_size - 1) / block_size);
    return s;
}

HybridCache::HybridCache(CacheLayout layout, kernels::Backend& backend, const CacheSizing& sizing)
    : backend_(backend), layout_(std::move(layout)), sizing_(sizing) {
    DI_CHECK(sizing.max_seqs > 0 && sizing.block_size > 0, "cache: max_seqs and block_size must be positive");
    ring_slots_ = slots_for(layout_, sizing.ring_slack);
    int64_t n = sizing.max_seqs, bs = sizing.block_size;
    auto carry = [&](const std::array<int64_t, 2>& shape) {
        return shape[0] > 0 ? backend.empty(DType::kF32, {n, carry_rows(shape[0], sizing.ring_slack), shape[1]}) : Tensor();
    };
    for (const auto& l : layout_.layers) {
        LayerState st;
        st.ring = backend.empty(layout_.kv_dtype, {n, ring_slots_, layout_.head_dim});  // read only where written
        st.carry = carry(l.carry);
        st.index_carry = carry(l.index_carry);
        int64_t slots = carry_snapshot_slots(layout_, sizing);
        if (slots > 0 && l.boundary_carry_rows > 0)
            st.carry_snapshots = backend.empty(DType::kF32, {slots, l.boundary_carry_rows, l.carry[1]});
        if (slots > 0 && l.boundary_index_carry_rows > 0)
            st.index_carry_snapshots = backend.empty(DType::kF32, {slots, l.boundary_index_carry_rows, l.index_carry[1]});
        if (l.group >= 0) {
            DI_CHECK(used(l.group), "cache layout: a layer uses block group {}, which has no rate", l.group);
            if (l.entry_dim > 0) st.entries = backend.empty(layout_.kv_dtype, {sizing.blocks[l.group], bs, l.entry_dim});
            if (l.index_dim > 0)
                st.index_entries = backend.empty(layout_.kv_dtype, {sizing.blocks[l.group], bs, l.index_dim});
        }
        layers_.push_back(std::move(st));
    }
    for (int g = 0; g < kBlockGroups; ++g) {
        for (int64_t b = sizing.blocks[g] - 1; b >= 0; --b) free_[g].push_back(static_cast<int32_t>(b));
        refs_[g].assign(sizing.blocks[g], 0);
        tables_[g].resize(n);
    }
    for (int s = sizing.max_seqs - 1; s >= 0; --s) free_states_.push_back(s);
    bytes_ = cache_bytes(layout_, sizing);
    prefix_ = plan_prefix_geometry();
}

int HybridCache::try_add_sequence() {
    if (free_states_.empty()) return -1;
    int s = free_states_.back();
    free_states_.pop_back();
    return s;
}

double HybridCache::usage() const {
    double u = 1.0 - static_cast<double>(free_states_.size()) / sizing_.max_seqs;
    for (int g = 0; g < kBlockGroups; ++g)
        if (used(g) && sizing_.blocks[g] > 0)
            u = std::max(u, 1.0 - static_cast<double>(free_[g].size()) / sizing_.blocks[g]);
    return u;
}

int64_t HybridCache::token_capacity() const {
    int64_t cap = INT64_C(1) << 40;
    for (int g = 0; g < kBlockGroups; ++g) {
        int rate = layout_.rates[g];
        if (used(g)) cap = std::min(cap, sizing_.blocks[g] * sizing_.block_size * rate + rate - 1);
    }
    return cap;
}

int HybridCache::add_sequence() {
    int s = try_add_sequence();
    DI_CHECK(s >= 0, "cache: all {} sequence slots are in use", sizing_.max_seqs);
    return s;
}

void HybridCache::remove_sequence(int state) {
    truncate(state, 0);
    free_states_.push_back(state);
}

int64_t HybridCache::blocks_needed(int group, int64_t num_tokens) const {
    if (!used(group)) return 0;
    int64_t entries = num_tokens / layout_.rates[group];
    return (entries + sizing_.block_size - 1) / sizing_.block_size;
}

bool HybridCache::reserve(int state, int64_t num_tokens) {
    std::array<int64_t, kBlockGroups> missing{};
    for (int g = 0; g < kBlockGroups; ++g) {
        missing[g] = std::max<int64_t>(0, blocks_needed(g, num_tokens) - static_cast<int64_t>(tables_[g][state].size()));
        if (missing[g] > static_cast<int64_t>(free_[g].size())) return false;
    }
    for (int g = 0; g < kBlockGroups; ++g)
        for (int64_t i = 0; i < missing[g]; ++i) {
            tables_[g][state].push_back(free_[g].back());
            refs_[g][free_[g].back()] = 1;
            free_[g].pop_back();
        }
    return true;
}

int64_t HybridCache::prefix_alignment() const { return prefix_span(layout_, sizing_.block_size); }

void HybridCache::describe(Batch& batch) const {
    batch.block_tables.assign(kBlockGroups, {});
    for (int g = 0; g < kBlockGroups; ++g)
        for (const auto& s : batch.seqs) batch.block_tables[g].push_back(tables_[g][s.state_idx]);
}

void HybridCache::truncate(int state, int64_t num_tokens) {
    for (int g = 0; g < kBlockGroups; ++g) {
        auto& table = tables_[g][state];
        int64_t keep = blocks_needed(g, num_tokens);
        while (static_cast<int64_t>(table.size()) > keep) {
            if (--refs_[g][table.back()] == 0) free_[g].push_back(table.back());
            table.pop_back();
        }
    }
}

std::vector<std::pair<std::string, int64_t>> HybridCache::bytes_by_kind() const {
    auto size = [](const Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : INT64_C(0); };
    int64_t rings = 0, carries = 0;
    for (const auto& l : layers_) {
        rings += size(l.ring);
        carries += size(l.carry) + size(l.index_carry);
    }
    int64_t snapshots = 0;
    for (const auto& l : layers_) snapshots += size(l.carry_snapshots) + size(l.index_carry_snapshots);
    std::vector<std::pair<std::string, int64_t>> kinds = {{"swa_rings", rings}, {"compressor_carries", carries}};
    if (snapshots > 0) kinds.emplace_back("prefix_carry_snapshots", snapshots);
    for (int g = 0; g < kBlockGroups; ++g)
        if (used(g))
            kinds.emplace_back(layout_.group_names[g] + "_entries", block_bytes(layout_, g, sizing_.block_size) * sizing_.blocks[g]);
    return kinds;
}

}  // namespace deepinfer::model
