#pragma once
// A fixed pool of worker threads for data-parallel kernels.
//
// run() hands out task indices [0, num_tasks) to the workers and the calling thread, and returns
// when all tasks are done. Workers spin briefly between jobs (kernels come in quick bursts during a
// forward pass) and then sleep. A run() issued from inside a task executes serially on the calling
// thread, so kernels may call each other without deadlock. One run() at a time per pool: the pool
// belongs to one backend, which serialises its calls.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deepinfer {

class ThreadPool {
public:
    // num_threads counts the calling thread; 0 means one per hardware thread.
    explicit ThreadPool(int num_threads = 0);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

    // Calls fn(task) for every task in [0, num_tasks).
    void run(int64_t num_tasks, const std::function<void(int64_t)>& fn);

    // Splits [0, n) into at most num_threads() contiguous ranges whose sizes are multiples of
    // `grain` (except the last) and calls fn(begin, end) on each.
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

private:
    void worker_loop();
    void work_on_current_job();

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int64_t> next_task_{0};
    std::atomic<int> workers_done_{0};  // workers finished with the current generation
    int64_t num_tasks_ = 0;
    const std::function<void(int64_t)>* job_ = nullptr;
    bool stopping_ = false;
};

}  // namespace deepinfer
