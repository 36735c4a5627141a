#pragma once
// A tier below host memory (local disk, a remote store): sealed blobs by key, moved by a worker
// thread of its own so the engine thread never waits for I/O. Writes are queued copies; reads
// land in host memory the caller keeps valid until their result comes back from poll(). A read
// that fails for any reason (absent, I/O error, a store that is down, a blob whose checks fail)
// is a miss, logged where it is more than an absence.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "deepinfer/engine.h"
#include "runtime/cache/prefix_blob.h"

namespace deepinfer::runtime {

struct BlobReadResult {
    uint64_t ticket = 0;
    bool ok = false;
};

class BlobTier {
public:
    BlobTier(std::string name, BlobLayout layout, uint64_t namespace_seed, size_t max_queued_writes);
    virtual ~BlobTier();
    BlobTier(const BlobTier&) = delete;
    BlobTier& operator=(const BlobTier&) = delete;

    const std::string& name() const { return name_; }
    // Whether the tier may hold `key` (a remote store cannot tell without asking: true).
    virtual bool may_contain(const PrefixKey& key) const = 0;
    // Queues a copy of a sealed blob; dropped (counted) when too many writes wait.
    void write(const PrefixKey& key, std::span<const std::byte> blob);
    // Queues a read of `key` into `dest` (layout.max_bytes()). Reads of one `chain` stop at its
    // first miss: the later ones of that chain fail without I/O.
    void read(const PrefixKey& key, std::byte* dest, uint64_t ticket, uint64_t chain);
    std::vector<BlobReadResult> poll();
    // Waits until every queued job is done (shutdown write-back), at most `timeout_ms`.
    void drain(int timeout_ms);
    PrefixCacheTierStats counters() const;

protected:
    // Stores / fetches one blob (the caller checks what was fetched); false with `error` set on
    // failure, false without one for an absent key.
    virtual bool put_blob(const PrefixKey& key, std::span<const std::byte> blob, std::string& error) = 0;
    virtual bool get_blob(const PrefixKey& key, std::byte* dest, int64_t capacity, int64_t& got, std::string& error) = 0;
    // Drops an entry whose read failed its checks (a damaged file is deleted).
    virtual void discard(const PrefixKey& key) { (void)key; }
    // Filled into counters(): entries and bytes held, capacity.
    virtual void describe(PrefixCacheTierStats& s) const = 0;
    // Call first in the subclass destructor: no job may run once the subclass is gone.
    void stop();
    const BlobLayout layout_;
    const uint64_t namespace_seed_;

private:
    struct Job {
        bool is_read = false;
        PrefixKey key;
        std::vector<std::byte> blob;  // write
        std::byte* dest = nullptr;    // read
        uint64_t ticket = 0, chain = 0;
    };
    void loop();
    void run_read(const Job& job);
    void run_write(const Job& job);
    void log_failure(const std::string& what);

    std::string name_;
    size_t max_queued_writes_;
    mutable std::mutex mutex_;
    std::condition_variable cv_, idle_cv_;
    std::deque<Job> reads_, writes_;
    std::vector<BlobReadResult> done_;
    std::vector<uint64_t> failed_chains_;  // recent chains that missed
    bool busy_ = false, stop_ = false;
    PrefixCacheTierStats stats_;
    std::chrono::steady_clock::time_point last_log_{};  // worker thread only
    int64_t suppressed_ = 0;
    std::thread thread_;
};

}  // namespace deepinfer::runtime
