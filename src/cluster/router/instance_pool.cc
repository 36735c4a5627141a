#include "cluster/router/instance_pool.h"

#include <algorithm>
#include <limits>
#include <string_view>

namespace deepinfer::cluster {

namespace {

// Chunk of prompt text per key: about a prefix-cache span of tokens is 4x this many bytes, so
// the router's prefix granularity is finer than any engine's cache.
constexpr size_t kChunkBytes = 128;
constexpr int64_t kBytesPerToken = 4;  // a rough estimate for text; token-id lists are longer per token

uint64_t fnv1a(uint64_t h, std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

}  // namespace

PromptKey prompt_key(const std::string& prompt_text, int64_t max_tokens) {
    PromptKey k;
    uint64_t h = 1469598103934665603ull;
    for (size_t at = 0; at + kChunkBytes <= prompt_text.size(); at += kChunkBytes)
        k.chunks.push_back(h = fnv1a(h, std::string_view(prompt_text).substr(at, kChunkBytes)));
    k.tokens = static_cast<int64_t>(prompt_text.size()) / kBytesPerToken + std::max<int64_t>(max_tokens, 0);
    return k;
}

InstancePool::InstancePool(std::vector<Instance> instances, double cache_weight, int64_t chunks_per_instance)
    : instances_(std::move(instances)), cache_weight_(cache_weight), chunks_per_instance_(chunks_per_instance),
      seen_(instances_.size()) {}

int64_t InstancePool::cached_chunks(int index, const PromptKey& key) const {
    const Seen& s = seen_[static_cast<size_t>(index)];
    size_t n = 0;
    while (n < key.chunks.size() && s.where.count(key.chunks[n])) ++n;
    return static_cast<int64_t>(n);
}

void InstancePool::remember(int index, const PromptKey& key) {
    Seen& s = seen_[static_cast<size_t>(index)];
    for (uint64_t c : key.chunks) {
        auto it = s.where.find(c);
        if (it != s.where.end()) s.lru.erase(it->second);
        s.lru.push_back(c);
        s.where[c] = std::prev(s.lru.end());
    }
    while (static_cast<int64_t>(s.lru.size()) > chunks_per_instance_) {
        s.where.erase(s.lru.front());
        s.lru.pop_front();
    }
}

int InstancePool::acquire(InstanceRole role, const PromptKey& key, const std::unordered_set<int>& exclude) {
    std::lock_guard<std::mutex> lock(mutex_);
    int best = -1;
    double best_score = -std::numeric_limits<double>::infinity();
    int64_t best_hit = 0;
    for (int i = 0; i < static_cast<int>(instances_.size()); ++i) {
        const Instance& in = instances_[static_cast<size_t>(i)];
        if (in.role != role || !in.healthy || exclude.count(i)) continue;
        int64_t hit = cached_chunks(i, key);
        double hit_tokens = static_cast<double>(hit * static_cast<int64_t>(kChunkBytes) / kBytesPerToken);
        // Ties (an idle pool, no prefix anywhere) go to the fewest requests, then the first.
        double score = cache_weight_ * hit_tokens - static_cast<double>(in.inflight_tokens) -
                       1e-3 * static_cast<double>(in.inflight_requests);
        if (score > best_score) best = i, best_score = score, best_hit = hit;
    }
    if (best < 0) return -1;
    Instance& in = instances_[static_cast<size_t>(best)];
    ++in.inflight_requests;
    in.inflight_tokens += key.tokens;
    ++in.routed;
    stats_.lookup_chunks += static_cast<int64_t>(key.chunks.size());
    stats_.hit_chunks += best_hit;
    remember(best, key);
    return best;
}

void InstancePool::release(int index, const PromptKey& key, bool failed) {
    std::lock_guard<std::mutex> lock(mutex_);
    Instance& in = instances_[static_cast<size_t>(index)];
    --in.inflight_requests;
    in.inflight_tokens -= key.tokens;
    if (failed) {
        ++in.failures;
        in.healthy = false;  // the health probe brings it back
    }
}

void InstancePool::set_healthy(int index, bool healthy) {
    std::lock_guard<std::mutex> lock(mutex_);
    instances_[static_cast<size_t>(index)].healthy = healthy;
}

std::vector<Instance> InstancePool::snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return instances_;
}

PoolStats InstancePool::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

bool InstancePool::has_role(InstanceRole role) const {
    return std::any_of(instances_.begin(), instances_.end(), [&](const Instance& i) { return i.role == role; });
}

}  // namespace deepinfer::cluster
