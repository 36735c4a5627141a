// The prefix cache's index side: lookups for queued sequences, taking a cached prefix at
// admission, and adding the spans sequences complete. Tier movement is in prefix_cache_tiers.cc.
#include "runtime/cache/prefix_cache.h"

#include <algorithm>

#include "base/error.h"
#include "base/logging.h"
#include "runtime/cache/disk_tier.h"
#include "runtime/cache/remote_store.h"

namespace deepinfer::runtime {

using Clock = std::chrono::steady_clock;

PrefixCache::PrefixCache(const PrefixCacheConfig& config, PrefixReplay replay, uint64_t namespace_seed,
                         model::PrefixBlocks& blocks, kernels::Backend& backend)
    : config_(config), replay_(replay), namespace_(namespace_seed), blocks_(blocks),
      geometry_(blocks.prefix_geometry()), layout_(geometry_) {
    DI_CHECK(geometry_.span_tokens > 0, "prefix cache: the cache layout has no block-aligned spans");
    for (int s = geometry_.carry_slots - 1; s >= 0; --s) free_carry_slots_.push_back(s);
    // Reads from the disk or the remote store land in host slots: a few even without a host tier.
    int64_t slots = std::max<int64_t>(config.host_bytes / layout_.max_bytes(), config.staging_spans);
    bool below = !config.disk_dir.empty() || !config.remote_url.empty();
    if (below) slots = std::max<int64_t>(slots, 16);
    if (slots > 0) host_ = std::make_unique<HostSlots>(backend, layout_.max_bytes(), slots);
    if (!config.disk_dir.empty())
        disk_ = std::make_unique<DiskTier>(config.disk_dir, config.disk_bytes, layout_, namespace_);
    if (!config.remote_url.empty())
        remote_ = std::make_unique<RemoteTier>(make_remote_store(config.remote_url, config.remote_timeout_ms), layout_,
                                               namespace_);
    const char* names[] = {"device", "host", "disk", "remote"};
    for (int t = 0; t < kPrefixTiers; ++t) tiers_[t].tier = names[t];
    spdlog::info("prefix cache: spans of {} tokens ({:.2f} MiB each), {} host slots{}{}", geometry_.span_tokens,
                 layout_.max_bytes() / 1048576.0, slots, disk_ ? ", disk " + config.disk_dir : "",
                 remote_ ? ", remote " + config.remote_url : "");
}

PrefixCache::~PrefixCache() = default;

std::vector<PrefixKey> PrefixCache::chain_keys(const Sequence& s) const {
    return chain_keys(std::span<const int32_t>(s.tokens.data(), static_cast<size_t>(s.prompt_len)));
}

std::vector<PrefixKey> PrefixCache::chain_keys(std::span<const int32_t> prompt) const {
    // The prompt's last position is always computed (it gives the first token's logits).
    int64_t spans = (static_cast<int64_t>(prompt.size()) - 1) / geometry_.span_tokens;
    std::vector<PrefixKey> keys;
    PrefixKey parent;
    for (int64_t i = 0; i < spans; ++i) {
        std::span<const int32_t> tokens(prompt.data() + i * geometry_.span_tokens, geometry_.span_tokens);
        keys.push_back(parent = chain_key(namespace_, parent, tokens));
    }
    return keys;
}

bool PrefixCache::has_carries(const PrefixNode& n) const {
    if (geometry_.carry_bytes == 0) return true;
    if (n.on_device && n.carry_slot >= 0) return true;
    return host_usable(n) && blob_has_carries(host_->at(n.host_slot));
}

// A host copy being made from the device counts: a copy back is queued after it.
bool PrefixCache::host_usable(const PrefixNode& n) const {
    return n.host == PrefixNode::HostState::kReady ||
           (n.host == PrefixNode::HostState::kFilling && n.host_origin == PrefixTier::kHost);
}

bool PrefixCache::usable(const PrefixNode& n) const { return n.on_device || host_usable(n); }

// No running sequence holds the span's blocks: the index's reference is the only one.
bool PrefixCache::unused(const PrefixNode& n) const {
    for (int g = 0; g < 2; ++g)
        for (int32_t b : n.blocks[g])
            if (blocks_.block_refs(g, b) > 1) return false;
    return true;
}

void PrefixCache::on_waiting(const Sequence& s) {
    Lookup lookup;
    lookup.keys = chain_keys(s);
    lookup.deadline = Clock::now() + std::chrono::milliseconds(config_.fetch_timeout_ms);
    uint64_t chain = ++next_chain_;
    for (size_t i = 0; i < lookup.keys.size(); ++i) {
        PrefixNode* n = index_.find(lookup.keys[i]);
        if (n != nullptr && usable(*n)) continue;
        if (n != nullptr && n->host == PrefixNode::HostState::kFilling) {  // being read for another request
            lookup.waiting.push_back(n->key);
            continue;
        }
        BlobTier* tier = disk_ && disk_->may_contain(lookup.keys[i]) ? disk_.get() : remote_.get();
        if (tier == nullptr || host_ == nullptr) break;
        if (n == nullptr) n = &index_.insert(lookup.keys[i], i == 0 ? PrefixKey{} : lookup.keys[i - 1], static_cast<int64_t>(i));
        start_read(*n, *tier, chain);
        if (n->host != PrefixNode::HostState::kFilling) break;  // no host slot to read into
        lookup.waiting.push_back(n->key);
    }
    lookups_[&s] = std::move(lookup);
}

bool PrefixCache::ready(const Sequence& s) const {
    auto it = lookups_.find(&s);
    if (it == lookups_.end() || Clock::now() > it->second.deadline) return true;
    return std::none_of(it->second.waiting.begin(), it->second.waiting.end(), [&](const PrefixKey& k) {
        const PrefixNode* n = const_cast<PrefixIndex&>(index_).find(k);
        return n != nullptr && n->host == PrefixNode::HostState::kFilling && !usable(*n);
    });
}

void PrefixCache::forget(const Sequence& s) { lookups_.erase(&s); }

int64_t PrefixCache::replay_of(const Sequence& s) const {
    return s.deterministic ? std::max(replay_.tokens, replay_.exact) : replay_.tokens;
}

// The deepest span of the chain a hit can end at: its carries are at hand and the hit is
// longer than the replay (-1: none).
int PrefixCache::usable_end(const std::vector<PrefixNode*>& chain, int64_t replay) const {
    for (int i = static_cast<int>(chain.size()) - 1; i >= 0; --i)
        if ((i + 1) * geometry_.span_tokens > replay && has_carries(*chain[i])) return i;
    return -1;
}

void PrefixCache::take_prefix(Sequence& s, int state) {
    auto it = lookups_.find(&s);
    std::vector<PrefixKey> keys = it != lookups_.end() ? it->second.keys : chain_keys(s);
    lookups_.erase(&s);
    lookup_tokens_ += s.prompt_len;
    s.indexed_until = s.cached_tokens = 0;
    s.indexed_key = {};
    std::vector<PrefixNode*> chain;
    for (const PrefixKey& k : keys) {
        PrefixNode* n = index_.find(k);
        if (n == nullptr || !usable(*n)) break;
        chain.push_back(n);
        taking_.insert(k);
    }
    int end = usable_end(chain, replay_of(s));
    chain.resize(end + 1);
    for (size_t i = 0; i < chain.size(); ++i)  // spans held in host memory come back to the device
        if (!chain[i]->on_device && !restore_to_device(*chain[i])) {
            chain.resize(i);
            chain.resize(usable_end(chain, replay_of(s)) + 1);
            break;
        }
    int64_t boundary = static_cast<int64_t>(chain.size()) * geometry_.span_tokens;
    if (!chain.empty() && !restore_carries(*chain.back(), state, boundary)) chain.clear();
    if (!chain.empty()) adopt_chain(s, state, chain);
    taking_.clear();
}

void PrefixCache::adopt_chain(Sequence& s, int state, const std::vector<PrefixNode*>& chain) {
    for (int g = 0; g < 2; ++g) {
        std::vector<int32_t> table;
        for (PrefixNode* n : chain) table.insert(table.end(), n->blocks[g].begin(), n->blocks[g].end());
        if (!table.empty()) blocks_.adopt_blocks(state, g, table);
    }
    int64_t boundary = static_cast<int64_t>(chain.size()) * geometry_.span_tokens;
    for (PrefixNode* n : chain) index_.touch(*n);
    s.num_computed = s.window_from = boundary - replay_of(s);  // the tail the rings need runs again
    s.compressed_until = s.indexed_until = boundary;
    s.indexed_key = chain.back()->key;
    s.cached_tokens = s.num_computed;
    hit_tokens_ += s.cached_tokens;
    int64_t spared = s.cached_tokens;  // credited to the spans in order: the replayed tail is the last's
    for (PrefixNode* n : chain) {
        count_hit(*n, std::min(spared, geometry_.span_tokens));
        spared -= std::min(spared, geometry_.span_tokens);
    }
}

void PrefixCache::untake_prefix(Sequence& s) {
    // Blocks go back with the slot; a queued carry restore into the freed slot is harmless (a
    // slot's next sequence writes every carry row before reading it, or restores its own).
    hit_tokens_ -= s.cached_tokens;
    s.num_computed = s.window_from = s.compressed_until = s.indexed_until = s.cached_tokens = 0;
    s.indexed_key = {};
}

int64_t PrefixCache::chunk_count(const Sequence& s, int64_t start, int64_t count) const {
    if (geometry_.carry_bytes == 0) return count;
    int64_t span = geometry_.span_tokens, end = start + count, boundary = end / span * span;
    // A hit never covers the prompt's last position, so the same prompt again starts from the
    // boundary before it: when the prompt is a whole number of spans, that one needs carries too
    // (the next chunk then ends at the prompt's end and saves those as well).
    int64_t repeat_boundary = (s.prompt_len - 1) / span * span;
    if (boundary > repeat_boundary && repeat_boundary > start) boundary = repeat_boundary;
    if (boundary <= start || boundary <= s.indexed_until || end - boundary <= geometry_.carry_slack) return count;
    return boundary - start;
}

void PrefixCache::on_computed(Sequence& s) {
    if (s.cache_state < 0) return;
    while (s.indexed_until + geometry_.span_tokens <= s.num_computed) index_span(s);
}

// The sequence's next span joins the index, holding the sequence's blocks for it where the
// index has none on the device.
void PrefixCache::index_span(Sequence& s) {
    int64_t span = geometry_.span_tokens, depth = s.indexed_until / span;
    std::span<const int32_t> tokens(s.tokens.data() + s.indexed_until, span);
    PrefixKey key = chain_key(namespace_, s.indexed_key, tokens);
    PrefixNode* n = index_.find(key);
    if (n == nullptr) n = &index_.insert(key, s.indexed_key, depth);
    if (n->tokens.empty()) n->tokens.assign(tokens.begin(), tokens.end());
    if (!n->on_device) {
        for (int g = 0; g < 2; ++g) {
            std::span<const int32_t> table = blocks_.blocks_of(s.cache_state, g);
            int64_t per = geometry_.blocks_per_span[g];
            n->blocks[g].assign(table.begin() + depth * per, table.begin() + (depth + 1) * per);
            for (int32_t b : n->blocks[g]) blocks_.retain_block(g, b);
        }
        index_.set_on_device(*n, true);
    }
    index_.touch(*n);
    s.indexed_until += span;
    s.indexed_key = key;
    if (geometry_.carry_bytes > 0 && n->carry_slot < 0 && s.num_computed - s.indexed_until <= geometry_.carry_slack)
        save_carries(*n, s);
}

void PrefixCache::save_carries(PrefixNode& n, const Sequence& s) {
    int slot = acquire_carry_slot(&n);
    if (slot < 0) return;
    n.carry_slot = slot;
    pending_.transfers.carry_saves.push_back({s.cache_state, s.indexed_until, slot});
}

void PrefixCache::count_hit(const PrefixNode& n, int64_t tokens) {
    PrefixTier t = n.on_device && n.host_pins == 0 ? PrefixTier::kDevice : n.host_origin;
    ++tiers_[static_cast<int>(t)].hit_spans;
    tiers_[static_cast<int>(t)].hit_tokens += tokens;
}

}  // namespace deepinfer::runtime
