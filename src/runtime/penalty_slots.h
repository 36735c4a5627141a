#pragma once
// Rows of the device penalty state (Backend::reset_penalties, Backend::sample_rows), one per
// sequence whose penalties need its token history. A sequence keeps its row while it lives, and
// sample_rows counts each token it samples there. Its history is written again from its tokens
// when its row was taken over (when every row is taken, a new sequence takes the row sampled
// longest ago, never one of the current step), and after a preemption, as its cache is rebuilt
// from its tokens then: the row never depends on what happened while it was not resident, at the
// cost of one row's rewrite next to a whole recompute. Engine thread only.
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace deepinfer::runtime {

struct Sequence;

class PenaltySlots {
public:
    explicit PenaltySlots(int capacity) : slots_(static_cast<size_t>(capacity)) {}

    // The row of `seq` in step number `step` (step numbers increase); `fresh` when its history
    // must be written before the step samples (a new row, or the first sample after a preemption).
    int acquire(const Sequence* seq, uint64_t step, bool& fresh);
    void release(const Sequence* seq);
    void release_all();

private:
    struct Slot {
        const Sequence* owner = nullptr;
        uint64_t last_step = 0;
        int preemptions = 0;  // the owner's count when its history was written
    };
    std::vector<Slot> slots_;
    std::unordered_map<const Sequence*, int> slot_of_;
};

}  // namespace deepinfer::runtime
