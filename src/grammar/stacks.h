#pragma once
// Run-time configurations of the pushdown automaton. A configuration is a current state plus a
// chain of return states (the stack). While a token or a trie walk is being processed, return
// frames live in a StackPool as a parent-linked tree, so configurations that share a stack prefix
// share its frames and a push or pop costs O(1). Between tokens a matcher keeps its configurations
// flattened in a StackSet, which is cheap to copy, compare and store for rollback.
#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer::grammar {

struct StackFrame {
    int32_t state;   // return state of the caller
    int32_t parent;  // frame below, -1 at the bottom
};

struct Config {
    int32_t state;
    int32_t parent;  // top return frame in the pool, -1 when the root rule is running
    bool operator==(const Config&) const = default;
};

class StackPool {
public:
    int32_t push(int32_t state, int32_t parent) {
        frames_.push_back({state, parent});
        return static_cast<int32_t>(frames_.size() - 1);
    }
    const StackFrame& operator[](int32_t i) const { return frames_[i]; }
    size_t size() const { return frames_.size(); }
    void truncate(size_t size) { frames_.resize(size); }
    void clear() { frames_.clear(); }

private:
    std::vector<StackFrame> frames_;
};

// A set of distinct stacks, each stored bottom to top as [depth, s_0, ..., s_top].
class StackSet {
public:
    void clear() { data_.clear(); }
    bool empty() const { return data_.empty(); }
    const std::vector<int32_t>& data() const { return data_; }

    // Adds the stack ending in `config` unless an equal one is present.
    void add(const Config& config, const StackPool& pool);
    // Recreates the configurations in `pool`, appending them to `out`.
    void load(StackPool& pool, std::vector<Config>& out) const;
    size_t num_stacks() const;
    bool operator==(const StackSet&) const = default;

private:
    std::vector<int32_t> data_;
    std::vector<int32_t> scratch_;
};

}  // namespace deepinfer::grammar
