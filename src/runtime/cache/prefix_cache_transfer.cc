// The prefix cache's side of prefill/decode disaggregation: a prompt's spans handed out as blobs
// (through the host tier, which already copies spans off the device with the steps), and spans
// from another engine taken into the host tier, where a request finds them as an ordinary hit.
#include <algorithm>
#include <cstring>

#include "base/logging.h"
#include "runtime/cache/prefix_cache.h"

namespace deepinfer::runtime {

namespace {

// An export whose next span stays out of reach this long (no host slot frees up, the span left
// the cache) ends with what it handed out; the receiver computes the rest.
constexpr auto kExportStallLimit = std::chrono::seconds(10);

}  // namespace

void PrefixCache::run_pending_transfers() {
    model::CacheTransfers t = take_transfers();
    blocks_.run_transfers(t);
    on_step_done(true);
}

uint64_t PrefixCache::start_export(std::span<const int32_t> prompt, std::shared_ptr<PrefixSpanSink> sink) {
    uint64_t id = ++next_export_;
    Export& e = exports_[id];
    e.keys = chain_keys(prompt);
    e.sink = std::move(sink);
    return id;
}

void PrefixCache::end_export_producer(uint64_t id) {
    auto it = exports_.find(id);
    if (it != exports_.end()) it->second.producer_done = true;
}

void PrefixCache::pump_exports() {
    for (auto it = exports_.begin(); it != exports_.end();) {
        if (!pump_export(it->second)) {
            ++it;
            continue;
        }
        it->second.sink->on_done(static_cast<int>(it->second.next));
        it = exports_.erase(it);
    }
}

void PrefixCache::end_exports() {
    for (auto& [id, e] : exports_) e.sink->on_done(static_cast<int>(e.next));
    exports_.clear();
}

// Hands out every span of the export that has a host copy, in order; queues a copy off the
// device for the next one. Spans the request has not computed yet are waited for.
bool PrefixCache::pump_export(Export& e) {
    using Clock = std::chrono::steady_clock;
    while (e.next < e.keys.size()) {
        PrefixNode* n = index_.find(e.keys[e.next]);
        if (n != nullptr && n->host == PrefixNode::HostState::kReady) {
            emit_span(e, *n);
            e.stalled_since = {};
            continue;
        }
        if (n != nullptr && n->host == PrefixNode::HostState::kNone && n->on_device && host_ != nullptr)
            copy_to_host(*n);  // runs with the next step (or run_pending_transfers)
        if (n != nullptr && n->host == PrefixNode::HostState::kFilling) return false;
        if (!e.producer_done) return false;  // not computed yet, or no host slot free yet
        if (n == nullptr || !n->on_device) return true;  // it will never come
        // Indexed, but no host slot could be had: give it a while.
        if (e.stalled_since == Clock::time_point{}) e.stalled_since = Clock::now();
        return Clock::now() - e.stalled_since > kExportStallLimit;
    }
    return true;
}

void PrefixCache::emit_span(Export& e, const PrefixNode& n) {
    const std::byte* blob = host_->at(n.host_slot);
    e.sink->on_span(static_cast<int>(e.next), std::vector<std::byte>(blob, blob + blob_bytes(blob)));
    index_.touch(const_cast<PrefixNode&>(n));
    ++e.next;
    ++exported_spans_;
}

std::string PrefixCache::check_import(std::span<const std::byte> blob) const {
    if (static_cast<int64_t>(blob.size()) < layout_.payload_offset()) return "truncated header";
    PrefixKey key = blob_key(blob.data());
    std::string bad = check_blob(blob, layout_, namespace_, key);
    if (!bad.empty()) return bad;
    if (!(chain_key(namespace_, blob_parent(blob.data()), blob_tokens(blob.data())) == key))
        return "its key does not hash its parent and tokens";
    return {};
}

bool PrefixCache::import_span(std::span<const std::byte> blob) {
    PrefixKey key = blob_key(blob.data()), parent = blob_parent(blob.data());
    bool root = parent == PrefixKey{};
    PrefixNode* n = index_.find(key);
    if (n != nullptr && (usable(*n) || n->host == PrefixNode::HostState::kFilling)) {
        index_.touch(*n);
        ++imported_spans_;
        return true;  // held already (or on its way from a tier below)
    }
    int slot = host_ != nullptr && (root || index_.find(parent) != nullptr) ? acquire_host_slot() : -1;
    // Making room may have evicted the parent (or a hollow node of this key): look again.
    PrefixNode* p = root ? nullptr : index_.find(parent);
    if (slot >= 0 && !root && p == nullptr) host_->release(std::exchange(slot, -1));
    if (slot < 0) {
        ++rejected_imports_;
        return false;
    }
    std::memcpy(host_->at(slot), blob.data(), blob.size());
    n = index_.find(key);
    if (n == nullptr) n = &index_.insert(key, parent, root ? 0 : p->depth + 1);
    std::span<const int32_t> tokens = blob_tokens(host_->at(slot));
    n->tokens.assign(tokens.begin(), tokens.end());
    n->host_slot = slot;
    n->host_origin = PrefixTier::kHost;
    n->written_below = false;
    index_.set_host(*n, PrefixNode::HostState::kReady);
    index_.touch(*n);
    ++imported_spans_;
    return true;
}

}  // namespace deepinfer::runtime
