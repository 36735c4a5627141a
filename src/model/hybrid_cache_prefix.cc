// HybridCache's side of prefix caching: blocks shared by reference count, carry snapshots at
// prefix boundaries, and the copies between the cache and host memory (PrefixBlocks).
#include <algorithm>
#include <chrono>

#include "base/error.h"
#include "model/hybrid_cache.h"

namespace deepinfer::model {

PrefixGeometry HybridCache::plan_prefix_geometry() const {
    PrefixGeometry p;
    p.span_tokens = prefix_alignment();
    if (p.span_tokens == 0) return p;
    for (int g = 0; g < kBlockGroups; ++g) {
        if (!used(g)) continue;
        p.blocks_per_span[g] = p.span_tokens / layout_.rates[g] / sizing_.block_size;
        p.block_bytes[g] = block_bytes(layout_, g, sizing_.block_size);
    }
    p.carry_bytes = carry_snapshot_floats(layout_) * int64_t{sizeof(float)};
    p.carry_slack = INT64_C(1) << 40;
    for (const auto& l : layout_.layers) {
        if (l.boundary_carry_rows > 0) p.carry_slack = std::min(p.carry_slack, l.carry[0] - l.boundary_carry_rows);
        if (l.boundary_index_carry_rows > 0)
            p.carry_slack = std::min(p.carry_slack, l.index_carry[0] - l.boundary_index_carry_rows);
    }
    p.carry_slots = static_cast<int>(carry_snapshot_slots(layout_, sizing_));
    return p;
}

void HybridCache::retain_block(int group, int32_t block) {
    DI_CHECK(refs_[group][block] > 0, "cache: retaining free block {} of group {}", block, group);
    ++refs_[group][block];
}

void HybridCache::release_block(int group, int32_t block) {
    DI_CHECK(refs_[group][block] > 0, "cache: releasing free block {} of group {}", block, group);
    if (--refs_[group][block] == 0) free_[group].push_back(block);
}

bool HybridCache::allocate_blocks(int group, int64_t n, std::vector<int32_t>& out) {
    if (n > static_cast<int64_t>(free_[group].size())) return false;
    for (int64_t i = 0; i < n; ++i) {
        out.push_back(free_[group].back());
        refs_[group][free_[group].back()] = 1;
        free_[group].pop_back();
    }
    return true;
}

void HybridCache::adopt_blocks(int state, int group, std::span<const int32_t> blocks) {
    DI_CHECK(tables_[group][state].empty(), "cache: adopting blocks into a sequence that holds some");
    for (int32_t b : blocks) {
        retain_block(group, b);
        tables_[group][state].push_back(b);
    }
}

namespace {

// Rows [first, first + count) of a ring of `rows` rows per state, as at most two contiguous views.
std::vector<Tensor> ring_rows(const Tensor& ring, int state, int64_t first, int64_t count) {
    int64_t rows = ring.dim(1);
    Tensor mine = ring.rows(state, state + 1).reshape({rows, ring.dim(2)});
    int64_t begin = first % rows, head = std::min(count, rows - begin);
    std::vector<Tensor> views = {mine.rows(begin, begin + head)};
    if (head < count) views.push_back(mine.rows(0, count - head));
    return views;
}

}  // namespace

// The carry rows of positions [boundary - rows, boundary) of a state <-> a snapshot slot.
void HybridCache::copy_carries(const CacheTransfers::Carry& c, bool save) {
    auto one = [&](const Tensor& ring, const Tensor& snapshots, int64_t rows) {
        if (rows == 0) return;
        Tensor slot = snapshots.rows(c.slot, c.slot + 1).reshape({rows, snapshots.dim(2)});
        int64_t done = 0;
        for (Tensor& part : ring_rows(ring, c.state, c.boundary - rows, rows)) {
            Tensor mine = slot.rows(done, done + part.dim(0));
            if (save) backend_.copy(part, mine);
            else backend_.copy(mine, part);
            done += part.dim(0);
        }
    };
    for (size_t l = 0; l < layers_.size(); ++l) {
        one(layers_[l].carry, layers_[l].carry_snapshots, layout_.layers[l].boundary_carry_rows);
        one(layers_[l].index_carry, layers_[l].index_carry_snapshots, layout_.layers[l].boundary_index_carry_rows);
    }
}

// The device regions of one block (or carry slot), layer by layer, against consecutive host bytes.
std::vector<kernels::HostTransfer> HybridCache::host_regions(const CacheTransfers::Host& h) {
    std::vector<kernels::HostTransfer> regions;
    std::byte* at = h.host;
    auto add = [&](const Tensor& pool) {
        if (!pool.defined()) return;
        Tensor r = pool.rows(h.index, h.index + 1);
        regions.push_back({r, at});
        at += r.nbytes();
    };
    for (size_t l = 0; l < layers_.size(); ++l) {
        if (h.group == CacheTransfers::kCarrySlot) {
            add(layers_[l].carry_snapshots);
            add(layers_[l].index_carry_snapshots);
        } else if (layout_.layers[l].group == h.group) {
            add(layers_[l].entries);
            add(layers_[l].index_entries);
        }
    }
    return regions;
}

void HybridCache::run_transfers(const CacheTransfers& t) {
    using Clock = std::chrono::steady_clock;
    for (const auto& c : t.carry_saves) copy_carries(c, true);
    auto run = [&](const std::vector<CacheTransfers::Host>& copies, bool to_host) {
        if (copies.empty()) return;
        std::vector<kernels::HostTransfer> regions;
        int64_t bytes = 0;
        for (const auto& h : copies)
            for (auto& r : host_regions(h)) {
                bytes += static_cast<int64_t>(r.device.nbytes());
                regions.push_back(r);
            }
        auto start = Clock::now();
        if (to_host) backend_.transfer_to_host(regions);
        else backend_.transfer_to_device(regions);
        backend_.sync_transfers();
        double secs = std::chrono::duration<double>(Clock::now() - start).count();
        (to_host ? totals_.copies_to_host : totals_.copies_to_device) += static_cast<int64_t>(copies.size());
        (to_host ? totals_.bytes_to_host : totals_.bytes_to_device) += bytes;
        (to_host ? totals_.seconds_to_host : totals_.seconds_to_device) += secs;
    };
    run(t.to_host, true);
    run(t.to_device, false);
    for (const auto& c : t.carry_restores) copy_carries(c, false);
}

}  // namespace deepinfer::model
