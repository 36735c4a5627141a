#include "base/host_allocator.h"

#include <sys/mman.h>

#include <bit>
#include <cstdlib>

#include "base/error.h"

namespace deepinfer {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
// Free lists above this many bytes in total are trimmed on release.
constexpr size_t kMaxCachedBytes = size_t{4} << 30;

}  // namespace

void* aligned_host_alloc(size_t bytes, size_t* rounded_out) {
    bytes = std::max<size_t>(bytes, 1);
    size_t align = bytes >= kHugePage ? kHugePage : 64;
    size_t rounded = (bytes + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    DI_CHECK(p != nullptr, "out of host memory allocating {} bytes", rounded);
    if (align == kHugePage) ::madvise(p, rounded, MADV_HUGEPAGE);
    if (rounded_out) *rounded_out = rounded;
    return p;
}

HostAllocator::~HostAllocator() {
    for (auto& [cls, blocks] : free_)
        for (void* p : blocks) std::free(p);
}

size_t HostAllocator::size_class(size_t bytes) {
    if (bytes <= 4096) return 4096;
    if (bytes >= kHugePage) return (bytes + kHugePage - 1) / kHugePage * kHugePage;
    return std::bit_ceil(bytes);
}

std::shared_ptr<void> HostAllocator::allocate(size_t bytes) {
    size_t cls = size_class(bytes);
    void* p = nullptr;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = free_.find(cls);
        if (it != free_.end() && !it->second.empty()) {
            p = it->second.back();
            it->second.pop_back();
            cached_ -= cls;
        }
    }
    if (p == nullptr) p = aligned_host_alloc(cls);
    std::weak_ptr<HostAllocator> self = weak_from_this();
    return std::shared_ptr<void>(p, [self, cls](void* q) {
        if (auto a = self.lock())
            a->release(q, cls);
        else
            std::free(q);
    });
}

void HostAllocator::release(void* p, size_t cls) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cached_ + cls > kMaxCachedBytes) {
        std::free(p);
        return;
    }
    free_[cls].push_back(p);
    cached_ += cls;
}

size_t HostAllocator::cached_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_;
}

}  // namespace deepinfer

namespace deepinfer {

std::shared_ptr<void> HostArena::allocate(size_t bytes) {
    bytes = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    if (!chunk_ || used_ + bytes > capacity_) {
        size_t size = std::max(chunk_bytes_, bytes);
        chunk_ = std::shared_ptr<char>(static_cast<char*>(aligned_host_alloc(size, &capacity_)), [](char* p) { std::free(p); });
        used_ = 0;
    }
    void* p = chunk_.get() + used_;
    used_ += bytes;
    return std::shared_ptr<void>(chunk_, p);  // aliasing constructor: owns the chunk
}

}  // namespace deepinfer
