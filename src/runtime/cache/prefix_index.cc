#include "runtime/cache/prefix_index.h"

#include "base/error.h"

namespace deepinfer::runtime {

PrefixNode* PrefixIndex::find(const PrefixKey& key) {
    auto it = nodes_.find(key);
    return it == nodes_.end() ? nullptr : &it->second;
}

PrefixNode* PrefixIndex::parent_of(const PrefixNode& node) { return node.depth == 0 ? nullptr : find(node.parent); }

PrefixNode& PrefixIndex::insert(const PrefixKey& key, const PrefixKey& parent, int64_t depth) {
    auto [it, fresh] = nodes_.try_emplace(key);
    DI_CHECK(fresh, "prefix index: key {} is there already", key.hex());
    PrefixNode& n = it->second;
    n.key = key;
    n.parent = parent;
    n.depth = depth;
    touch(n);
    if (PrefixNode* p = parent_of(n)) ++p->children;
    return n;
}

void PrefixIndex::erase_if_unused(PrefixNode& node) {
    if (node.on_device || node.host != PrefixNode::HostState::kNone || node.children > 0) return;
    PrefixNode* p = parent_of(node);
    nodes_.erase(node.key);
    if (p == nullptr) return;
    --p->children;
    erase_if_unused(*p);  // a hollow parent kept only for this child goes too
}

void PrefixIndex::set_on_device(PrefixNode& node, bool on) {
    if (node.on_device == on) return;
    node.on_device = on;
    if (PrefixNode* p = parent_of(node)) p->device_children += on ? 1 : -1;
}

void PrefixIndex::set_host(PrefixNode& node, PrefixNode::HostState state) {
    bool was = node.host != PrefixNode::HostState::kNone, now = state != PrefixNode::HostState::kNone;
    node.host = state;
    if (was != now)
        if (PrefixNode* p = parent_of(node)) p->host_children += now ? 1 : -1;
}

PrefixNode* PrefixIndex::least_recent(const std::function<bool(const PrefixNode&)>& pick) {
    PrefixNode* best = nullptr;
    for (auto& [key, n] : nodes_)
        if ((best == nullptr || n.last_use < best->last_use) && pick(n)) best = &n;
    return best;
}

PrefixNode* PrefixIndex::lru_leaf(PrefixTier tier, const std::function<bool(const PrefixNode&)>& can_evict) {
    return least_recent([&](const PrefixNode& n) {
        bool held = tier == PrefixTier::kDevice ? n.on_device && n.device_children == 0
                                                : n.host == PrefixNode::HostState::kReady && n.host_children == 0;
        return held && can_evict(n);
    });
}

int64_t PrefixIndex::count(PrefixTier tier) const {
    int64_t c = 0;
    for (const auto& [key, n] : nodes_)
        c += tier == PrefixTier::kDevice ? n.on_device : n.host == PrefixNode::HostState::kReady;
    return c;
}

}  // namespace deepinfer::runtime
