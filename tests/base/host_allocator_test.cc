#include "base/host_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace deepinfer {
namespace {

TEST(HostAllocator, ReusesFreedBlocksOfTheSameClass) {
    auto a = HostAllocator::create();
    void* first;
    {
        auto b = a->allocate(3000);
        first = b.get();
        std::memset(first, 1, 3000);
    }
    EXPECT_EQ(a->cached_bytes(), 4096u);
    auto again = a->allocate(4000);  // same 4 KiB class
    EXPECT_EQ(again.get(), first);
    EXPECT_EQ(a->cached_bytes(), 0u);
    auto big = a->allocate(5u << 20);  // huge-page class: 2 MiB aligned
    EXPECT_EQ(reinterpret_cast<uintptr_t>(big.get()) % (2u << 20), 0u);
}

TEST(HostAllocator, BlocksOutliveTheAllocator) {
    std::shared_ptr<void> b;
    {
        auto a = HostAllocator::create();
        b = a->allocate(100);
    }
    std::memset(b.get(), 0, 100);  // still valid; freed when b goes
}

TEST(HostArena, PacksAlignedBuffersIntoChunks) {
    HostArena arena(1u << 20);
    auto x = arena.allocate(10), y = arena.allocate(100);
    EXPECT_EQ(static_cast<char*>(y.get()) - static_cast<char*>(x.get()), 64);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(y.get()) % 64, 0u);
    auto huge = arena.allocate(3u << 20);  // larger than a chunk: gets its own
    std::memset(huge.get(), 0, 3u << 20);
    auto z = arena.allocate(64);
    EXPECT_NE(z.get(), nullptr);
}

}  // namespace
}  // namespace deepinfer
