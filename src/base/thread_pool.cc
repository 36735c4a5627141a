#include "base/thread_pool.h"

#include <algorithm>

namespace deepinfer {
namespace {

thread_local bool tls_inside_pool_task = false;

// An idle worker polls for the next job (kernels come in quick bursts during a forward pass):
// first with `pause`, then yielding its core (so oversubscribed threads do not starve the ones
// with work), and after kYieldIterations it sleeps on the condition variable.
constexpr int kPauseIterations = 4096;
constexpr int kYieldIterations = 6000;

inline void backoff(int iteration) {
    if (iteration < kPauseIterations) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    } else {
        std::this_thread::yield();
    }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
    if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::work_on_current_job() {
    tls_inside_pool_task = true;
    for (;;) {
        int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
        if (task >= num_tasks_) break;
        (*job_)(task);
    }
    tls_inside_pool_task = false;
}

void ThreadPool::worker_loop() {
    uint64_t seen = 0;
    for (;;) {
        for (int i = 0; generation_.load(std::memory_order_acquire) == seen && i < kYieldIterations; ++i) backoff(i);
        if (generation_.load(std::memory_order_acquire) == seen) {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return generation_.load() != seen; });
        }
        seen = generation_.load(std::memory_order_acquire);
        if (stopping_) return;
        work_on_current_job();
        workers_done_.fetch_add(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::run(int64_t num_tasks, const std::function<void(int64_t)>& fn) {
    if (num_tasks <= 0) return;
    if (workers_.empty() || num_tasks == 1 || tls_inside_pool_task) {
        for (int64_t i = 0; i < num_tasks; ++i) fn(i);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        job_ = &fn;
        num_tasks_ = num_tasks;
        next_task_.store(0);
        workers_done_.store(0);
        generation_.fetch_add(1, std::memory_order_acq_rel);
    }
    wake_.notify_all();
    work_on_current_job();
    // Every worker takes part in every generation (possibly finding no task left), so once all
    // have reported, all tasks are done and no worker can still touch this job.
    for (int i = 0; workers_done_.load(std::memory_order_acquire) < static_cast<int>(workers_.size()); ++i)
        backoff(std::min(i, kPauseIterations));
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    int64_t num_grains = (n + grain - 1) / grain;
    int64_t num_chunks = std::min<int64_t>(num_threads(), num_grains);
    int64_t grains_per_chunk = (num_grains + num_chunks - 1) / num_chunks;
    num_chunks = (num_grains + grains_per_chunk - 1) / grains_per_chunk;
    run(num_chunks, [&](int64_t chunk) {
        int64_t begin = chunk * grains_per_chunk * grain;
        int64_t end = std::min(n, begin + grains_per_chunk * grain);
        fn(begin, end);
    });
}

}  // namespace deepinfer
