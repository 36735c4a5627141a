#pragma once
// Moves sets of configurations of a Pda forward: expands calls and returns (which read no byte),
// reads one byte, and answers whether the output may end here and which bytes may come next.
#include <cstdint>
#include <span>
#include <vector>

#include "grammar/byte_set.h"
#include "grammar/pda.h"
#include "grammar/stacks.h"

namespace deepinfer::grammar {

class PdaStepper {
public:
    explicit PdaStepper(const Pda& pda);

    // Appends to `out` the distinct configurations reached from `from` by reading `b`.
    void step(std::span<const Config> from, uint8_t b, StackPool& pool, std::vector<Config>& out) {
        size_t first = out.size();
        for (const Config& c : from) {
            if (!needs_expansion(c)) {
                int32_t t = pda_.step(c.state, b);
                if (t != Pda::kDead) add_unique(out, first, {t, c.parent});
            } else {
                expand(c, pool, [&](const Config& e) {
                    int32_t t = pda_.step(e.state, b);
                    if (t != Pda::kDead) add_unique(out, first, {t, e.parent});
                });
            }
        }
    }

    // Some configuration can reach the end of the root rule with an empty stack.
    bool can_end(std::span<const Config> configs, StackPool& pool);
    // Every byte some configuration can read next.
    ByteSet next_bytes(std::span<const Config> configs, StackPool& pool);

    // A configuration that can only read a byte in its own DFA (no call, no return).
    bool needs_expansion(const Config& c) const {
        return pda_.has_calls(c.state) || (c.parent >= 0 && pda_.accepting(c.state));
    }

private:
    static void add_unique(std::vector<Config>& out, size_t first, Config c) {
        for (size_t i = first; i < out.size(); ++i)
            if (out[i] == c) return;
        out.push_back(c);
    }

    // Calls fn on every configuration reachable from `start` through calls (pushing a return
    // frame) and returns (popping one) without reading a byte.
    template <typename Fn>
    void expand(Config start, StackPool& pool, Fn&& fn) {
        visited_.clear();
        todo_.clear();
        todo_.push_back(start);
        while (!todo_.empty()) {
            Config c = todo_.back();
            todo_.pop_back();
            if (seen(c)) continue;
            fn(c);
            for (const CallEdge& call : pda_.calls(c.state))
                todo_.push_back({call.callee_start, pool.push(call.return_state, c.parent)});
            if (c.parent >= 0 && pda_.accepting(c.state)) todo_.push_back({pool[c.parent].state, pool[c.parent].parent});
        }
    }
    bool seen(const Config& c) {
        for (const Config& v : visited_)
            if (v == c) return true;
        visited_.push_back(c);
        return false;
    }

    const Pda& pda_;
    std::vector<ByteSet> class_bytes_;
    std::vector<Config> visited_, todo_;
};

}  // namespace deepinfer::grammar
