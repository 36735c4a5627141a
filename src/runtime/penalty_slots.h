#pragma once
// Rows of the device penalty state (Backend::reset_penalties, Backend::sample_rows), one per
// sequence whose penalties need its token history. A sequence keeps its row while it lives, and
// sample_rows counts each token it samples there. When every row is taken, the row of a sequence
// that the current step does not sample is taken over; that sequence's history is written again
// (from its tokens) when it next samples. Engine thread only.
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
    // must be written before the step samples.
    int acquire(const Sequence* seq, uint64_t step, bool& fresh);
    void release(const Sequence* seq);
    void release_all();

private:
    struct Slot {
        const Sequence* owner = nullptr;
        uint64_t last_step = 0;
    };
    std::vector<Slot> slots_;
    std::unordered_map<const Sequence*, int> slot_of_;
};

}  // namespace deepinfer::runtime
