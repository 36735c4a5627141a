#pragma once
// The router's picture of its engine instances: health, the load it sent them (requests and
// estimated tokens in flight) and which prompt prefixes each has seen, and the choice it makes
// from that. Cache-aware: an instance scores cache_weight x (prompt tokens it likely has cached)
// minus the tokens it is working on; the best healthy score wins. Thread-safe.
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cluster/http_client.h"

namespace deepinfer::cluster {

enum class InstanceRole { kReplica, kPrefill, kDecode };

// A prompt as the router sees it (no tokenizer): its text cut into fixed chunks, each keyed by a
// hash chain over the chunks before it, so equal keys mean equal prefixes.
struct PromptKey {
    std::vector<uint64_t> chunks;
    int64_t tokens = 0;  // estimated prompt tokens (+ what it may generate): its load
};
// `prompt_text` is the completion's prompt or the chat's messages, serialized as sent.
PromptKey prompt_key(const std::string& prompt_text, int64_t max_tokens);

struct Instance {
    HttpTarget target;
    InstanceRole role = InstanceRole::kReplica;
    bool healthy = true;  // until a probe or a call says otherwise
    int64_t inflight_requests = 0, inflight_tokens = 0;
    uint64_t routed = 0, failures = 0;
};

struct PoolStats {
    int64_t lookup_chunks = 0, hit_chunks = 0;  // prefix chunks routed, and of those found on the chosen instance
};

class InstancePool {
public:
    InstancePool(std::vector<Instance> instances, double cache_weight, int64_t chunks_per_instance);

    // The instance of `role` to send `key` to, skipping `exclude` (indices already tried); -1 when
    // none is healthy. Counts the request as in flight there and remembers its prefix.
    int acquire(InstanceRole role, const PromptKey& key, const std::unordered_set<int>& exclude);
    // The request sent by acquire() finished (or failed) there.
    void release(int index, const PromptKey& key, bool failed);
    void set_healthy(int index, bool healthy);

    std::vector<Instance> snapshot() const;
    PoolStats stats() const;
    size_t size() const { return instances_.size(); }
    bool has_role(InstanceRole role) const;

private:
    int64_t cached_chunks(int index, const PromptKey& key) const;
    void remember(int index, const PromptKey& key);

    mutable std::mutex mutex_;
    std::vector<Instance> instances_;
    double cache_weight_;
    int64_t chunks_per_instance_;
    // Per instance: the prefix chunks it was sent, least recently used first (bounded).
    struct Seen {
        std::list<uint64_t> lru;
        std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
    };
    std::vector<Seen> seen_;
    PoolStats stats_;
};

}  // namespace deepinfer::cluster
