#pragma once
// A caching allocator for host buffers. Freed blocks go back to a free list of their size class
// and are handed out again, so a steady stream of same-shaped temporaries (every forward step
// allocates the same activations) neither calls malloc nor faults in fresh pages. Blocks of 2 MiB
// and more are 2 MiB aligned and advised to use huge pages. Thread-safe; allocations outlive the
// allocator safely (the last owner returns or frees them).
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace deepinfer {

class HostAllocator : public std::enable_shared_from_this<HostAllocator> {
public:
    static std::shared_ptr<HostAllocator> create() { return std::shared_ptr<HostAllocator>(new HostAllocator()); }
    ~HostAllocator();

    // A block of at least `bytes` bytes (64-byte aligned) that returns itself here when released.
    std::shared_ptr<void> allocate(size_t bytes);
    // Bytes currently held in free lists.
    size_t cached_bytes() const;

private:
    HostAllocator() = default;
    static size_t size_class(size_t bytes);
    void release(void* p, size_t size_class);

    mutable std::mutex mutex_;
    std::map<size_t, std::vector<void*>> free_;  // size class -> free blocks
    size_t cached_ = 0;
};

// Raw aligned allocation with the huge-page advice for large blocks (no caching).
void* aligned_host_alloc(size_t bytes, size_t* rounded = nullptr);

// Long-lived buffers (weights) packed back to back into large huge-page chunks. Streaming reads
// of many small 4 KiB-paged buffers were measured 10x slower than the same bytes in 2 MiB pages
// (TLB misses under virtualisation), and rounding each buffer up to 2 MiB would waste memory.
// Not thread-safe; chunks live as long as any buffer in them.
class HostArena {
public:
    explicit HostArena(size_t chunk_bytes = size_t{256} << 20) : chunk_bytes_(chunk_bytes) {}
    // 64-byte aligned; the returned owner keeps the whole chunk alive.
    std::shared_ptr<void> allocate(size_t bytes);

private:
    size_t chunk_bytes_;
    std::shared_ptr<char> chunk_;
    size_t used_ = 0, capacity_ = 0;
};

}  // namespace deepinfer
