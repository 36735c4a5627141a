#pragma once
// The in-memory part of the prefix cache: one node per cached span, keyed by its chain key, with
// where the span's state is held (device blocks, a host slot) and what is needed to keep the
// tiers prefix-closed: a node leaves a tier only when none of its children is in that tier
// (leaf first), least recently used first. Engine thread only.
#include <array>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "runtime/cache/prefix_key.h"

namespace deepinfer::runtime {

enum class PrefixTier { kDevice = 0, kHost = 1, kDisk = 2, kRemote = 3 };
inline constexpr int kPrefixTiers = 4;

struct PrefixNode {
    PrefixKey key, parent;
    int64_t depth = 0;  // covers tokens [depth * span, (depth + 1) * span)
    std::vector<int32_t> tokens;  // the span's tokens (written into its blob)
    uint64_t last_use = 0;
    // Device tier: the span's blocks of each group, and the carries at its end.
    bool on_device = false;
    std::array<std::vector<int32_t>, 2> blocks;
    int carry_slot = -1;          // device snapshot slot holding the carries (-1: none)
    // Host tier: a slot holding the span as a blob.
    enum class HostState { kNone, kFilling, kReady } host = HostState::kNone;
    int host_slot = -1;
    int host_pins = 0;            // uploads from the slot not yet run
    PrefixTier host_origin = PrefixTier::kHost;  // where the host copy came from
    bool written_below = false;   // already handed to the disk / remote tiers
    // Children of this node held in each in-memory tier (leaf-first eviction).
    int children = 0, device_children = 0, host_children = 0;
};

class PrefixIndex {
public:
    PrefixNode* find(const PrefixKey& key);
    // A new node (the key must be absent); its parent's child count goes up.
    PrefixNode& insert(const PrefixKey& key, const PrefixKey& parent, int64_t depth);
    // Drops a node held nowhere any more (no children left in memory; else it stays, hollow, so
    // its children keep their chain).
    void erase_if_unused(PrefixNode& node);
    void set_on_device(PrefixNode& node, bool on);
    void set_host(PrefixNode& node, PrefixNode::HostState state);
    void touch(PrefixNode& node) { node.last_use = ++clock_; }
    // The least recently used node of `tier` (device or host) that has no children there and
    // passes `can_evict`; null when there is none.
    PrefixNode* lru_leaf(PrefixTier tier, const std::function<bool(const PrefixNode&)>& can_evict);
    // The least recently used node that passes `pick`; null when none does.
    PrefixNode* least_recent(const std::function<bool(const PrefixNode&)>& pick);
    int64_t count(PrefixTier tier) const;
    void for_each(const std::function<void(PrefixNode&)>& visit) {
        for (auto& [key, n] : nodes_) visit(n);
    }
    size_t size() const { return nodes_.size(); }

private:
    PrefixNode* parent_of(const PrefixNode& node);
    std::unordered_map<PrefixKey, PrefixNode, PrefixKeyHash> nodes_;
    uint64_t clock_ = 0;
};

}  // namespace deepinfer::runtime
