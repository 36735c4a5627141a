#include "runtime/cache/disk_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "base/error.h"
#include "base/logging.h"

namespace deepinfer::runtime {
namespace fs = std::filesystem;

namespace {

constexpr const char* kSuffix = ".kv";

bool parse_key(const std::string& stem, PrefixKey& key) {
    if (stem.size() != 32 || stem.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
    key.high = std::stoull(stem.substr(0, 16), nullptr, 16);
    key.low = std::stoull(stem.substr(16), nullptr, 16);
    return true;
}

// Writes all of `bytes` at the file's start; false with errno's message in `error`.
bool write_all(int fd, std::span<const std::byte> bytes, std::string& error) {
    size_t done = 0;
    while (done < bytes.size()) {
        ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            error = n < 0 ? std::strerror(errno) : "short write";
            return false;
        }
        done += static_cast<size_t>(n);
    }
    return true;
}

}  // namespace

DiskTier::DiskTier(std::string dir, int64_t capacity_bytes, BlobLayout layout, uint64_t namespace_seed)
    : BlobTier("disk", layout, namespace_seed, 256), dir_(std::move(dir)), capacity_(capacity_bytes) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    DI_CHECK(fs::is_directory(dir_), "prefix cache: {} is not a directory ({})", dir_, ec.message());
    scan();
}

DiskTier::~DiskTier() { stop(); }

// Entries left by an earlier run, oldest first by modification time; unfinished temporaries go.
void DiskTier::scan() {
    std::vector<std::pair<fs::file_time_type, std::pair<PrefixKey, int64_t>>> found;
    for (const auto& e : fs::directory_iterator(dir_)) {
        std::string name = e.path().filename().string();
        PrefixKey key;
        std::error_code ec;
        if (name.ends_with(".tmp")) {
            fs::remove(e.path(), ec);
        } else if (e.path().extension() == kSuffix && parse_key(e.path().stem().string(), key)) {
            found.push_back({e.last_write_time(ec), {key, static_cast<int64_t>(e.file_size(ec))}});
        }
    }
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::lock_guard<std::mutex> lock(files_mutex_);
    for (const auto& [time, entry] : found) {
        files_[entry.first] = {entry.second, ++clock_};
        by_use_[clock_] = entry.first;
        used_ += entry.second;
    }
    if (!found.empty()) spdlog::info("prefix cache: disk tier {} holds {} entries from before", dir_, found.size());
}

std::string DiskTier::path_of(const PrefixKey& key) const { return dir_ + "/" + key.hex() + kSuffix; }

bool DiskTier::may_contain(const PrefixKey& key) const {
    std::lock_guard<std::mutex> lock(files_mutex_);
    return files_.count(key) != 0;
}

void DiskTier::forget(const PrefixKey& key) {
    std::lock_guard<std::mutex> lock(files_mutex_);
    auto it = files_.find(key);
    if (it == files_.end()) return;
    used_ -= it->second.bytes;
    by_use_.erase(it->second.last_use);
    files_.erase(it);
}

// Deletes least recently used files until `bytes` more fit under the cap.
void DiskTier::make_room(int64_t bytes) {
    for (;;) {
        PrefixKey victim;
        {
            std::lock_guard<std::mutex> lock(files_mutex_);
            if (used_ + bytes <= capacity_ || by_use_.empty()) return;
            victim = by_use_.begin()->second;
            ++evictions_;
        }
        forget(victim);
        std::error_code ec;
        fs::remove(path_of(victim), ec);
    }
}

bool DiskTier::put_blob(const PrefixKey& key, std::span<const std::byte> blob, std::string& error) {
    if (may_contain(key)) return true;
    int64_t bytes = static_cast<int64_t>(blob.size());
    if (bytes > capacity_) {
        error = "entry larger than the disk tier";
        return false;
    }
    make_room(bytes);
    std::string tmp = path_of(key) + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        error = std::string("open: ") + std::strerror(errno);
        return false;
    }
    bool ok = write_all(fd, blob, error);
    ::close(fd);
    if (ok && ::rename(tmp.c_str(), path_of(key).c_str()) != 0) {
        error = std::string("rename: ") + std::strerror(errno);
        ok = false;
    }
    if (!ok) {  // a full disk leaves a partial temporary: remove it, keep nothing
        ::unlink(tmp.c_str());
        return false;
    }
    std::lock_guard<std::mutex> lock(files_mutex_);
    files_[key] = {bytes, ++clock_};
    by_use_[clock_] = key;
    used_ += bytes;
    return true;
}

bool DiskTier::get_blob(const PrefixKey& key, std::byte* dest, int64_t capacity, int64_t& got, std::string& error) {
    {
        std::lock_guard<std::mutex> lock(files_mutex_);
        auto it = files_.find(key);
        if (it == files_.end()) return false;
        by_use_.erase(it->second.last_use);
        it->second.last_use = ++clock_;
        by_use_[clock_] = key;
    }
    std::string path = path_of(key);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ssize_t total = 0;
    if (fd >= 0) {
        for (ssize_t n; total < capacity && (n = ::pread(fd, dest + total, capacity - total, total)) != 0;) {
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) break;
            total += n;
        }
        ::close(fd);
    }
    if (fd < 0) {
        error = std::string("open: ") + std::strerror(errno);
        discard(key);
        return false;
    }
    got = total;
    return true;
}

// A file that cannot be used is deleted, so it is not read again.
void DiskTier::discard(const PrefixKey& key) {
    forget(key);
    ::unlink(path_of(key).c_str());
}

void DiskTier::describe(PrefixCacheTierStats& s) const {
    std::lock_guard<std::mutex> lock(files_mutex_);
    s.entries = static_cast<int64_t>(files_.size());
    s.bytes = used_;
    s.capacity_bytes = capacity_;
    s.evictions = evictions_;
}

}  // namespace deepinfer::runtime
