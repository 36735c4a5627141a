#include "runtime/penalty_slots.h"

#include "base/error.h"
#include "runtime/sequence.h"

namespace deepinfer::runtime {

int PenaltySlots::acquire(const Sequence* seq, uint64_t step, bool& fresh) {
    auto it = slot_of_.find(seq);
    if (it != slot_of_.end()) {
        Slot& slot = slots_[it->second];
        slot.last_step = step;
        fresh = slot.preemptions != seq->preemptions;
        slot.preemptions = seq->preemptions;
        return it->second;
    }
    // A free row, else the one sampled longest ago (never one of this step).
    int pick = -1;
    for (size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i].owner == nullptr) {
            pick = static_cast<int>(i);
            break;
        }
        if (pick < 0 || slots_[i].last_step < slots_[pick].last_step) pick = static_cast<int>(i);
    }
    DI_CHECK(pick >= 0 && (slots_[pick].owner == nullptr || slots_[pick].last_step < step),
             "penalty state: more sequences with penalties in one step than its {} rows", slots_.size());
    if (slots_[pick].owner != nullptr) slot_of_.erase(slots_[pick].owner);
    slots_[pick] = {seq, step, seq->preemptions};
    slot_of_[seq] = pick;
    fresh = true;
    return pick;
}

void PenaltySlots::release(const Sequence* seq) {
    auto it = slot_of_.find(seq);
    if (it == slot_of_.end()) return;
    slots_[it->second] = {};
    slot_of_.erase(it);
}

void PenaltySlots::release_all() {
    for (Slot& s : slots_) s = {};
    slot_of_.clear();
}

}  // namespace deepinfer::runtime
