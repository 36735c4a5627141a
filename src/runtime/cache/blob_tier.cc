#include "runtime/cache/blob_tier.h"

#include <algorithm>
#include <chrono>

#include "base/logging.h"

namespace deepinfer::runtime {

BlobTier::BlobTier(std::string name, BlobLayout layout, uint64_t namespace_seed, size_t max_queued_writes)
    : layout_(layout), namespace_seed_(namespace_seed), name_(std::move(name)), max_queued_writes_(max_queued_writes) {
    stats_.tier = name_;
    thread_ = std::thread([this] { loop(); });
}

BlobTier::~BlobTier() { stop(); }

void BlobTier::stop() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_) return;
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void BlobTier::write(const PrefixKey& key, std::span<const std::byte> blob) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (writes_.size() >= max_queued_writes_) {
            ++stats_.dropped_writes;
            return;
        }
        writes_.push_back({false, key, std::vector<std::byte>(blob.begin(), blob.end())});
    }
    cv_.notify_all();
}

void BlobTier::read(const PrefixKey& key, std::byte* dest, uint64_t ticket, uint64_t chain) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        reads_.push_back({true, key, {}, dest, ticket, chain});
    }
    cv_.notify_all();
}

std::vector<BlobReadResult> BlobTier::poll() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(done_, {});
}

void BlobTier::drain(int timeout_ms) {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                      [&] { return reads_.empty() && writes_.empty() && !busy_; });
}

PrefixCacheTierStats BlobTier::counters() const {
    PrefixCacheTierStats s;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        s = stats_;
    }
    describe(s);
    return s;
}

void BlobTier::loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        cv_.wait(lock, [&] { return stop_ || !reads_.empty() || !writes_.empty(); });
        if (stop_) return;
        // Reads first: a request waits for them; writes only keep entries for later.
        Job job;
        if (!reads_.empty()) {
            job = std::move(reads_.front());
            reads_.pop_front();
        } else {
            job = std::move(writes_.front());
            writes_.pop_front();
        }
        busy_ = true;
        lock.unlock();
        if (job.is_read) run_read(job);
        else run_write(job);
        lock.lock();
        busy_ = false;
        if (reads_.empty() && writes_.empty()) idle_cv_.notify_all();
    }
}

void BlobTier::run_read(const Job& job) {
    bool skip;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        skip = std::find(failed_chains_.begin(), failed_chains_.end(), job.chain) != failed_chains_.end();
    }
    bool ok = false;
    std::string error;
    auto start = std::chrono::steady_clock::now();
    int64_t got = 0;
    if (!skip && get_blob(job.key, job.dest, layout_.max_bytes(), got, error)) {
        error = check_blob({job.dest, static_cast<size_t>(got)}, layout_, namespace_seed_, job.key);
        ok = error.empty();
        if (!ok) discard(job.key);
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!error.empty()) log_failure("entry " + job.key.hex() + " unusable, counted as a miss: " + error);
    std::lock_guard<std::mutex> lock(mutex_);
    if (ok) {
        stats_.bytes_read += blob_bytes(job.dest);
        stats_.read_seconds += secs;
        ++stats_.reads;
    } else {
        if (!error.empty()) ++stats_.errors;
        failed_chains_.push_back(job.chain);
        if (failed_chains_.size() > 64) failed_chains_.erase(failed_chains_.begin());
    }
    done_.push_back({job.ticket, ok});
}

// At most one warning a second: a store that is down fails every operation.
void BlobTier::log_failure(const std::string& what) {
    auto now = std::chrono::steady_clock::now();
    if (now - last_log_ < std::chrono::seconds(1)) {
        ++suppressed_;
        return;
    }
    if (suppressed_ > 0) spdlog::warn("prefix cache: {}: {} (and {} more failures)", name_, what, suppressed_);
    else spdlog::warn("prefix cache: {}: {}", name_, what);
    last_log_ = now;
    suppressed_ = 0;
}

void BlobTier::run_write(const Job& job) {
    std::string error;
    auto start = std::chrono::steady_clock::now();
    bool ok = put_blob(job.key, job.blob, error);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!ok) log_failure("entry " + job.key.hex() + " not stored: " + error);
    std::lock_guard<std::mutex> lock(mutex_);
    if (ok) {
        stats_.bytes_written += static_cast<int64_t>(job.blob.size());
        stats_.write_seconds += secs;
        ++stats_.writes;
    } else {
        ++stats_.errors;
    }
}

}  // namespace deepinfer::runtime
