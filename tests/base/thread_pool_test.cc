#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <vector>

namespace deepinfer {
namespace {

TEST(ThreadPool, RunsEveryTaskExactlyOnce) {
    ThreadPool pool(4);
    for (int64_t tasks : {0, 1, 3, 4, 17, 1000}) {
        std::vector<std::atomic<int>> hits(tasks);
        pool.run(tasks, [&](int64_t i) { hits[i]++; });
        for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
}

TEST(ThreadPool, ParallelForCoversRangeInGrains) {
    ThreadPool pool(3);
    for (int64_t n : {1, 5, 16, 100, 1001}) {
        std::vector<int> seen(n, 0);
        pool.parallel_for(n, 8, [&](int64_t b, int64_t e) {
            EXPECT_TRUE(b % 8 == 0);
            for (int64_t i = b; i < e; ++i) seen[i]++;
        });
        EXPECT_EQ(std::accumulate(seen.begin(), seen.end(), 0), n);
        for (int s : seen) EXPECT_EQ(s, 1);
    }
}

TEST(ThreadPool, NestedRunExecutesInline) {
    ThreadPool pool(4);
    std::atomic<int> total{0};
    pool.run(8, [&](int64_t) { pool.run(10, [&](int64_t) { total++; }); });
    EXPECT_EQ(total.load(), 80);
}

TEST(ThreadPool, ManyShortJobsBackToBack) {
    ThreadPool pool(4);
    std::atomic<int64_t> sum{0};
    for (int j = 0; j < 2000; ++j) pool.run(4, [&](int64_t i) { sum += i; });
    EXPECT_EQ(sum.load(), 2000 * 6);
}

}  // namespace
}  // namespace deepinfer
