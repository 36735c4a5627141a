#pragma once
// The disk tier: one file per cached span in a directory (<key>.kv, a sealed blob), written to a
// temporary name and renamed, so a reader never sees a half-written entry under its real name;
// an entry cut short anyway (a crash, a full disk) fails its checks on read and is deleted. The
// directory is scanned at start, so entries survive a restart. Past the size cap the least
// recently used files go. Thread-safe.
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

#include "runtime/cache/blob_tier.h"

namespace deepinfer::runtime {

class DiskTier final : public BlobTier {
public:
    DiskTier(std::string dir, int64_t capacity_bytes, BlobLayout layout, uint64_t namespace_seed);
    ~DiskTier() override;
    bool may_contain(const PrefixKey& key) const override;

private:
    bool put_blob(const PrefixKey& key, std::span<const std::byte> blob, std::string& error) override;
    bool get_blob(const PrefixKey& key, std::byte* dest, int64_t capacity, int64_t& got, std::string& error) override;
    void describe(PrefixCacheTierStats& s) const override;
    void discard(const PrefixKey& key) override;
    void scan();
    void forget(const PrefixKey& key);
    void make_room(int64_t bytes);
    std::string path_of(const PrefixKey& key) const;

    struct File {
        int64_t bytes = 0;
        uint64_t last_use = 0;
    };
    std::string dir_;
    int64_t capacity_;
    mutable std::mutex files_mutex_;
    std::unordered_map<PrefixKey, File, PrefixKeyHash> files_;
    std::map<uint64_t, PrefixKey> by_use_;  // least recently used first
    uint64_t clock_ = 0;
    int64_t used_ = 0, evictions_ = 0;
};

}  // namespace deepinfer::runtime
