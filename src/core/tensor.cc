#include "core/tensor.h"

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "base/host_allocator.h"

namespace deepinfer {

int64_t Tensor::numel() const {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return n;
}

size_t Tensor::nbytes() const {
    if (shape_.empty()) return dtype_size(dtype_);
    int64_t last = shape_.back();
    return last == 0 ? 0 : static_cast<size_t>(numel() / last) * dtype_row_bytes(dtype_, last);
}

std::string Tensor::shape_string() const { return fmt::format("[{}]", fmt::join(shape_, ", ")); }

Tensor Tensor::empty(DType dtype, std::vector<int64_t> shape) {
    Tensor t;
    t.dtype_ = dtype;
    t.shape_ = std::move(shape);
    for (int64_t d : t.shape_) DI_CHECK(d >= 0, "negative tensor dimension in {}", t.shape_string());
    // Large buffers (weights, caches) are streamed through: aligned_host_alloc backs them with
    // 2 MiB pages where the kernel allows, so reading them is not bound by TLB misses.
    void* p = aligned_host_alloc(t.nbytes());
    t.data_ = p;
    t.owner_ = std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
    return t;
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
    Tensor t = empty(dtype, std::move(shape));
    std::memset(t.data_, 0, t.nbytes());
    return t;
}

Tensor Tensor::wrap(void* data, DType dtype, std::vector<int64_t> shape, std::shared_ptr<const void> owner,
                    Device device) {
    Tensor t;
    t.data_ = data;
    t.dtype_ = dtype;
    t.device_ = device;
    t.shape_ = std::move(shape);
    t.owner_ = std::move(owner);
    return t;
}

Tensor Tensor::reshape(std::vector<int64_t> shape) const {
    int64_t known = 1;
    int infer = -1;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == -1) {
            DI_CHECK(infer < 0, "reshape: more than one -1");
            infer = static_cast<int>(i);
        } else {
            known *= shape[i];
        }
    }
    if (infer >= 0) shape[infer] = known == 0 ? 0 : numel() / known;
    Tensor t = *this;
    t.shape_ = std::move(shape);
    DI_CHECK(t.numel() == numel(), "reshape {} -> {} changes the element count", shape_string(), t.shape_string());
    DI_CHECK(!is_block_quantized(dtype_) || (!shape_.empty() && !t.shape_.empty() && t.shape_.back() == shape_.back()),
             "reshape {} -> {}: a block-quantized tensor keeps its rows", shape_string(), t.shape_string());
    return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
    DI_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "rows({}, {}) out of range for {}",
             begin, end, shape_string());
    Tensor t = *this;
    int64_t row_bytes = shape_[0] == 0 ? 0 : static_cast<int64_t>(nbytes()) / shape_[0];
    t.data_ = static_cast<char*>(data_) + begin * row_bytes;
    t.shape_[0] = end - begin;
    return t;
}

}  // namespace deepinfer
