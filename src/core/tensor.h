#pragma once
// Tensor: a typed, shaped, contiguous (row-major) view of memory on one device, with shared
// ownership of the allocation it points into (an owned buffer, a memory-mapped file, ...).
// Copies are cheap and alias the same memory. Views made by reshape()/rows() keep the owner alive.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace deepinfer {

enum class Device : uint8_t { kCpu, kCuda };

class Tensor {
public:
    Tensor() = default;

    // A new, uninitialised, 64-byte aligned host tensor.
    static Tensor empty(DType dtype, std::vector<int64_t> shape);
    // A new host tensor filled with zeros.
    static Tensor zeros(DType dtype, std::vector<int64_t> shape);
    // A view of memory that `owner` keeps alive (owner may be null for memory that outlives the view).
    static Tensor wrap(void* data, DType dtype, std::vector<int64_t> shape, std::shared_ptr<const void> owner,
                       Device device = Device::kCpu);

    bool defined() const { return data_ != nullptr; }
    DType dtype() const { return dtype_; }
    Device device() const { return device_; }
    const std::vector<int64_t>& shape() const { return shape_; }
    int ndim() const { return static_cast<int>(shape_.size()); }
    int64_t dim(int i) const { return shape_.at(i < 0 ? i + ndim() : i); }
    int64_t numel() const;
    size_t nbytes() const;
    std::string shape_string() const;

    void* raw() const { return data_; }
    template <typename T>
    T* data() const { return static_cast<T*>(data_); }

    // Same memory, new shape with the same number of elements; one dimension may be -1.
    Tensor reshape(std::vector<int64_t> shape) const;
    // Rows [begin, end) of the first dimension.
    Tensor rows(int64_t begin, int64_t end) const;

private:
    void* data_ = nullptr;
    DType dtype_ = DType::kF32;
    Device device_ = Device::kCpu;
    std::vector<int64_t> shape_;
    std::shared_ptr<const void> owner_;
};

}  // namespace deepinfer
