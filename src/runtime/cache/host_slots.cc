#include "runtime/cache/host_slots.h"

#include "base/error.h"

namespace deepinfer::runtime {

HostSlots::HostSlots(kernels::Backend& backend, int64_t slot_bytes, int64_t count)
    : slot_bytes_((slot_bytes + 255) / 256 * 256), count_(count) {
    DI_CHECK(count > 0 && slot_bytes > 0, "prefix cache: the host tier needs at least one slot");
    buffer_ = backend.host_buffer(slot_bytes_ * count_);
    base_ = static_cast<std::byte*>(buffer_.raw());
    for (int s = static_cast<int>(count_) - 1; s >= 0; --s) free_.push_back(s);
}

int HostSlots::acquire() {
    if (free_.empty()) return -1;
    int s = free_.back();
    free_.pop_back();
    return s;
}

void HostSlots::release(int slot) { free_.push_back(slot); }

}  // namespace deepinfer::runtime
