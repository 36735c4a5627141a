#pragma once
// The host-memory tier's storage: equal slots (one cached span as a blob each) carved from one
// buffer the backend gives (page-locked on a GPU, so copies to and from the device run
// asynchronously on its transfer queue). Engine thread only.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend.h"

namespace deepinfer::runtime {

class HostSlots {
public:
    HostSlots(kernels::Backend& backend, int64_t slot_bytes, int64_t count);
    // A free slot, or -1.
    int acquire();
    void release(int slot);
    std::byte* at(int slot) const { return base_ + slot * slot_bytes_; }
    int64_t count() const { return count_; }
    int64_t in_use() const { return count_ - static_cast<int64_t>(free_.size()); }
    int64_t slot_bytes() const { return slot_bytes_; }

private:
    Tensor buffer_;
    std::byte* base_ = nullptr;
    int64_t slot_bytes_ = 0, count_ = 0;
    std::vector<int> free_;
};

}  // namespace deepinfer::runtime
