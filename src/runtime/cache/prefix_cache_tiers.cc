// The prefix cache's tier side: spans moving between the device pool, host slots, the disk and
// the remote store; the copies queued with steps; statistics.
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/logging.h"
#include "runtime/cache/prefix_cache.h"

namespace deepinfer::runtime {

uint64_t prefix_namespace(const std::string& model_dir, const std::string& device, const model::PrefixGeometry& g,
                          const std::string& numerics) {
    namespace fs = std::filesystem;
    std::ostringstream id;
    id << device << '|' << numerics << '|' << g.span_tokens << '|' << g.block_bytes[0] << '|' << g.block_bytes[1] << '|' << g.carry_bytes;
    id << '|' << std::ifstream(fs::path(model_dir) / "config.json").rdbuf();
    // The weights: each safetensors file's size and its first and last MiB (header and data).
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(model_dir))
        if (e.path().extension() == ".safetensors") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
        std::ifstream in(f, std::ios::binary);
        int64_t size = static_cast<int64_t>(fs::file_size(f)), piece = std::min<int64_t>(size, 1 << 20);
        std::string head(piece, '\0'), tail(piece, '\0');
        in.read(head.data(), piece);
        in.seekg(size - piece);
        in.read(tail.data(), piece);
        id << '|' << f.filename().string() << '|' << size << '|' << XXH3_64bits(head.data(), head.size()) << '|'
           << XXH3_64bits(tail.data(), tail.size());
    }
    std::string s = id.str();
    return XXH3_64bits(s.data(), s.size());
}

// --- device ---------------------------------------------------------------------------------

// A free carry snapshot slot, else the least recently used span's (carries matter only where a
// hit ends, so any span but `keep` may lose them, unless a queued restore still reads them).
int PrefixCache::acquire_carry_slot(const PrefixNode* keep) {
    if (free_carry_slots_.empty()) {
        const auto& restores = pending_.transfers.carry_restores;
        PrefixNode* victim = index_.least_recent([&](const PrefixNode& n) {
            return n.carry_slot >= 0 && &n != keep && !taking_.count(n.key) &&
                   std::none_of(restores.begin(), restores.end(), [&](const auto& r) { return r.slot == n.carry_slot; });
        });
        if (victim == nullptr) return -1;
        free_carry_slots_.push_back(std::exchange(victim->carry_slot, -1));
    }
    int s = free_carry_slots_.back();
    free_carry_slots_.pop_back();
    return s;
}

bool PrefixCache::evict_one() {
    PrefixNode* n = index_.lru_leaf(PrefixTier::kDevice, [&](const PrefixNode& c) { return !taking_.count(c.key) && unused(c); });
    if (n == nullptr) return false;
    if (host_ != nullptr && n->host == PrefixNode::HostState::kNone) copy_to_host(*n);
    release_device(*n);
    ++tiers_[static_cast<int>(PrefixTier::kDevice)].evictions;
    index_.erase_if_unused(*n);
    return true;
}

void PrefixCache::release_device(PrefixNode& n) {
    for (int g = 0; g < 2; ++g) {
        for (int32_t b : n.blocks[g]) blocks_.release_block(g, b);
        n.blocks[g].clear();
    }
    if (n.carry_slot >= 0) pending_.freed_carry_slots.push_back(n.carry_slot);  // copies may still read it
    n.carry_slot = -1;
    index_.set_on_device(n, false);
}

// Queues the span's copy from the device into a host slot (write-back on device eviction).
void PrefixCache::copy_to_host(PrefixNode& n) {
    int slot = acquire_host_slot();
    if (slot < 0 || n.tokens.empty()) {
        if (slot >= 0) host_->release(slot);
        return;
    }
    std::byte* blob = host_->at(slot);
    bool carries = geometry_.carry_bytes > 0 && n.carry_slot >= 0;
    begin_blob(blob, layout_, {namespace_, n.key, n.parent, n.tokens, carries});
    auto& out = pending_.transfers.to_host;
    for (int g = 0; g < 2; ++g)
        for (size_t i = 0; i < n.blocks[g].size(); ++i) out.push_back({g, n.blocks[g][i], layout_.block(blob, g, i)});
    if (carries) out.push_back({model::CacheTransfers::kCarrySlot, n.carry_slot, layout_.carries(blob)});
    n.host_slot = slot;
    n.host_origin = PrefixTier::kHost;
    n.written_below = false;
    index_.set_host(n, PrefixNode::HostState::kFilling);
    pending_.filled.push_back(n.key);
}

// Device blocks for a span held in host memory, filled from its slot with the next step.
bool PrefixCache::restore_to_device(PrefixNode& n) {
    std::array<std::vector<int32_t>, 2> fresh;
    for (int g = 0; g < 2; ++g) {
        while (!blocks_.allocate_blocks(g, geometry_.blocks_per_span[g], fresh[g]))
            if (!evict_one()) {
                for (int h = 0; h <= g; ++h)
                    for (int32_t b : fresh[h]) blocks_.release_block(h, b);
                return false;
            }
    }
    std::byte* blob = host_->at(n.host_slot);
    for (int g = 0; g < 2; ++g)
        for (size_t i = 0; i < fresh[g].size(); ++i)
            pending_.transfers.to_device.push_back({g, fresh[g][i], layout_.block(blob, g, i)});
    n.blocks = std::move(fresh);
    ++n.host_pins;
    pending_.pinned.push_back(n.key);
    index_.set_on_device(n, true);
    return true;
}

// Queues the end span's carries into the sequence's slot (from the device snapshot, or from
// the host copy through a snapshot slot).
bool PrefixCache::restore_carries(PrefixNode& n, int state, int64_t boundary) {
    if (geometry_.carry_bytes == 0) return true;
    if (n.carry_slot < 0) {
        int slot = acquire_carry_slot(&n);
        if (slot < 0) return false;
        pending_.transfers.to_device.push_back(
            {model::CacheTransfers::kCarrySlot, slot, layout_.carries(host_->at(n.host_slot))});
        ++n.host_pins;
        pending_.pinned.push_back(n.key);
        n.carry_slot = slot;
    }
    pending_.transfers.carry_restores.push_back({state, boundary, n.carry_slot});
    return true;
}

// --- host -------------------------------------------------------------------------------------

int PrefixCache::acquire_host_slot() {
    int slot = host_->acquire();
    if (slot >= 0) return slot;
    PrefixNode* victim = index_.lru_leaf(PrefixTier::kHost, [&](const PrefixNode& n) {
        return n.host_pins == 0 && !taking_.count(n.key);
    });
    if (victim == nullptr) return -1;
    evict_host(*victim);
    return host_->acquire();
}

void PrefixCache::evict_host(PrefixNode& n) {
    if (!n.written_below) write_below(n);
    host_->release(n.host_slot);
    n.host_slot = -1;
    index_.set_host(n, PrefixNode::HostState::kNone);
    ++tiers_[static_cast<int>(PrefixTier::kHost)].evictions;
    index_.erase_if_unused(n);
}

// Write-back below host memory: the disk keeps it for this engine (and its restarts), the
// remote store for every engine.
void PrefixCache::write_below(PrefixNode& n) {
    const std::byte* blob = host_->at(n.host_slot);
    std::span<const std::byte> bytes(blob, static_cast<size_t>(blob_bytes(blob)));
    if (disk_ && n.host_origin != PrefixTier::kDisk) disk_->write(n.key, bytes);
    if (remote_ && n.host_origin != PrefixTier::kRemote) remote_->write(n.key, bytes);
    n.written_below = true;
}

// --- disk and remote ----------------------------------------------------------------------------

void PrefixCache::start_read(PrefixNode& n, BlobTier& tier, uint64_t chain) {
    int slot = acquire_host_slot();
    if (slot < 0) return;
    n.host_slot = slot;
    n.host_origin = &tier == disk_.get() ? PrefixTier::kDisk : PrefixTier::kRemote;
    n.written_below = true;
    index_.set_host(n, PrefixNode::HostState::kFilling);
    uint64_t ticket = ++next_ticket_;
    reads_[ticket] = n.key;
    tier.read(n.key, host_->at(slot), ticket, chain);
}

void PrefixCache::poll() {
    for (BlobTier* tier : {disk_.get(), remote_.get()}) {
        if (tier == nullptr) continue;
        for (const BlobReadResult& r : tier->poll()) {
            auto it = reads_.find(r.ticket);
            if (it == reads_.end()) continue;
            PrefixNode* n = index_.find(it->second);
            reads_.erase(it);
            if (n == nullptr || n->host != PrefixNode::HostState::kFilling) continue;
            if (r.ok) {
                std::span<const int32_t> tokens = blob_tokens(host_->at(n->host_slot));
                n->tokens.assign(tokens.begin(), tokens.end());
                index_.set_host(*n, PrefixNode::HostState::kReady);
                index_.touch(*n);
                continue;
            }
            host_->release(n->host_slot);
            n->host_slot = -1;
            n->written_below = false;  // it was not there after all
            index_.set_host(*n, PrefixNode::HostState::kNone);
            index_.erase_if_unused(*n);
        }
    }
}

// --- steps ----------------------------------------------------------------------------------------

model::CacheTransfers PrefixCache::take_transfers() {
    inflight_ = std::exchange(pending_, {});
    return inflight_.transfers;
}

void PrefixCache::on_step_done(bool ok) {
    for (const PrefixKey& k : inflight_.filled) {
        PrefixNode* n = index_.find(k);
        if (n == nullptr || n->host != PrefixNode::HostState::kFilling) continue;
        if (ok) {
            seal_blob(host_->at(n->host_slot), layout_);
            index_.set_host(*n, PrefixNode::HostState::kReady);
            continue;
        }
        host_->release(n->host_slot);
        n->host_slot = -1;
        index_.set_host(*n, PrefixNode::HostState::kNone);
        index_.erase_if_unused(*n);
    }
    for (const PrefixKey& k : inflight_.pinned)
        if (PrefixNode* n = index_.find(k)) --n->host_pins;
    free_carry_slots_.insert(free_carry_slots_.end(), inflight_.freed_carry_slots.begin(), inflight_.freed_carry_slots.end());
    inflight_ = {};
}

void PrefixCache::write_back_all(int timeout_ms) {
    if (host_ == nullptr || (disk_ == nullptr && remote_ == nullptr)) return;
    for (BlobTier* tier : {disk_.get(), remote_.get()})  // reads in flight give their slots back
        if (tier) tier->drain(timeout_ms);
    poll();
    for (;;) {  // device spans pass through host slots, as many at a time as there are
        std::vector<PrefixKey> batch;
        while (static_cast<int64_t>(batch.size()) < host_->count()) {
            PrefixNode* n = index_.least_recent([](const PrefixNode& c) {
                return c.on_device && c.host == PrefixNode::HostState::kNone && !c.written_below && !c.tokens.empty();
            });
            if (n == nullptr) break;
            copy_to_host(*n);
            if (n->host == PrefixNode::HostState::kNone) break;
            batch.push_back(n->key);
        }
        model::CacheTransfers t = take_transfers();
        blocks_.run_transfers(t);
        on_step_done(true);
        for (const PrefixKey& k : batch)
            if (PrefixNode* n = index_.find(k)) evict_host(*n);
        if (batch.empty()) break;
    }
    index_.for_each([&](PrefixNode& n) {  // spans only in host memory
        if (n.host == PrefixNode::HostState::kReady && !n.written_below) write_below(n);
    });
    if (disk_) disk_->drain(timeout_ms);
    if (remote_) remote_->drain(timeout_ms);
}

PrefixCacheStats PrefixCache::stats() const {
    PrefixCacheStats s;
    s.enabled = true;
    s.span_tokens = geometry_.span_tokens;
    s.replay_tokens = replay_.tokens;
    s.lookup_tokens = lookup_tokens_;
    s.hit_tokens = hit_tokens_;
    s.exported_spans = exported_spans_;
    s.imported_spans = imported_spans_;
    s.rejected_imports = rejected_imports_;
    PrefixIndex& index = const_cast<PrefixIndex&>(index_);
    PrefixCacheTierStats device = tiers_[0];
    device.entries = index.count(PrefixTier::kDevice);
    device.bytes = device.entries * (layout_.group_bytes[0] + layout_.group_bytes[1]);
    s.tiers.push_back(device);
    if (host_) {
        PrefixCacheTierStats host = tiers_[1];
        host.entries = index.count(PrefixTier::kHost);
        host.bytes = host_->in_use() * host_->slot_bytes();
        host.capacity_bytes = host_->count() * host_->slot_bytes();
        model::TransferTotals t = blocks_.transfer_totals();
        host.reads = t.copies_to_device, host.bytes_read = t.bytes_to_device, host.read_seconds = t.seconds_to_device;
        host.writes = t.copies_to_host, host.bytes_written = t.bytes_to_host, host.write_seconds = t.seconds_to_host;
        s.tiers.push_back(host);
    }
    for (int t = 2; t < kPrefixTiers; ++t) {
        const BlobTier* tier = t == 2 ? disk_.get() : remote_.get();
        if (tier == nullptr) continue;
        PrefixCacheTierStats c = tier->counters();
        c.hit_spans = tiers_[t].hit_spans;
        c.hit_tokens = tiers_[t].hit_tokens;
        s.tiers.push_back(c);
    }
    return s;
}

}  // namespace deepinfer::runtime
