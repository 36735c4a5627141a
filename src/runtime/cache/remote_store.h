#pragma once
// The remote tier: a key-value store shared by several engines (cached spans are keyed by
// content, so any engine of the same model can use what another stored). RemoteStore is what a
// store implements (Redis here); RemoteTier runs it on the tier's worker thread.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "runtime/cache/blob_tier.h"

namespace deepinfer::runtime {

class RemoteStore {
public:
    virtual ~RemoteStore() = default;
    // Blocking calls, made from one thread. False with `error` set on failure; get() returns
    // false without an error when the key is absent.
    virtual bool put(const std::string& key, std::span<const std::byte> value, std::string& error) = 0;
    virtual bool get(const std::string& key, std::byte* dest, int64_t capacity, int64_t& got, std::string& error) = 0;
    virtual void remove(const std::string& key) = 0;
    virtual std::string describe() const = 0;
};

// "redis://HOST:PORT[/DB]"; operations give up after `timeout_ms`. Throws deepinfer::Error for a
// URL it cannot parse (an unreachable store is not an error: its reads miss until it is back).
std::unique_ptr<RemoteStore> make_remote_store(const std::string& url, int timeout_ms);

class RemoteTier final : public BlobTier {
public:
    RemoteTier(std::unique_ptr<RemoteStore> store, BlobLayout layout, uint64_t namespace_seed);
    ~RemoteTier() override;
    bool may_contain(const PrefixKey&) const override { return true; }

private:
    bool put_blob(const PrefixKey& key, std::span<const std::byte> blob, std::string& error) override;
    bool get_blob(const PrefixKey& key, std::byte* dest, int64_t capacity, int64_t& got, std::string& error) override;
    void discard(const PrefixKey& key) override { store_->remove(name_of(key)); }
    void describe(PrefixCacheTierStats& s) const override;
    static std::string name_of(const PrefixKey& key) { return "deepinfer:prefix:" + key.hex(); }

    std::unique_ptr<RemoteStore> store_;
};

}  // namespace deepinfer::runtime
