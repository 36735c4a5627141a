// The Redis remote store, on hiredis. One connection, opened on first use and again after a
// failure (no sooner than a back-off later, so a store that is down costs a failed connect now
// and then, not one per read); every operation is bounded by the timeout.
#include <hiredis/hiredis.h>

#include <chrono>
#include <cstring>
#include <regex>

#include "base/error.h"
#include "base/logging.h"
#include "runtime/cache/remote_store.h"

namespace deepinfer::runtime {
namespace {

using Clock = std::chrono::steady_clock;

class RedisStore final : public RemoteStore {
public:
    RedisStore(std::string host, int port, int db, int timeout_ms) : host_(std::move(host)), port_(port), db_(db) {
        timeout_ = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    }
    ~RedisStore() override { disconnect(); }

    bool put(const std::string& key, std::span<const std::byte> value, std::string& error) override {
        redisReply* r = command(error, "SET %b %b", key.data(), key.size(), value.data(), value.size());
        bool ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
        if (r != nullptr && !ok) error = reply_error(r);
        if (r) freeReplyObject(r);
        return ok;
    }

    bool get(const std::string& key, std::byte* dest, int64_t capacity, int64_t& got, std::string& error) override {
        redisReply* r = command(error, "GET %b", key.data(), key.size());
        if (r == nullptr) return false;
        bool ok = r->type == REDIS_REPLY_STRING;
        if (ok) {
            got = std::min<int64_t>(static_cast<int64_t>(r->len), capacity);
            std::memcpy(dest, r->str, static_cast<size_t>(got));
        } else if (r->type != REDIS_REPLY_NIL) {
            error = reply_error(r);
        }
        freeReplyObject(r);
        return ok;
    }

    void remove(const std::string& key) override {
        std::string error;
        if (redisReply* r = command(error, "DEL %b", key.data(), key.size())) freeReplyObject(r);
    }

    std::string describe() const override { return "redis " + host_ + ":" + std::to_string(port_); }

private:
    static std::string reply_error(const redisReply* r) {
        return r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : "unexpected reply type " + std::to_string(r->type);
    }

    // Runs a command on a live connection; null with `error` set when there is none or it broke.
    template <typename... Args>
    redisReply* command(std::string& error, const char* format, Args... args) {
        if (!connect(error)) return nullptr;
        auto* r = static_cast<redisReply*>(redisCommand(ctx_, format, args...));
        if (r == nullptr) {
            error = describe() + ": " + (ctx_->errstr[0] ? ctx_->errstr : "no reply");
            drop();
        }
        return r;
    }

    bool connect(std::string& error) {
        if (ctx_ != nullptr) return true;
        if (Clock::now() < retry_at_) {
            error = describe() + " is unreachable";
            return false;
        }
        ctx_ = redisConnectWithTimeout(host_.c_str(), port_, timeout_);
        if (ctx_ == nullptr || ctx_->err != 0 || redisSetTimeout(ctx_, timeout_) != REDIS_OK) {
            error = describe() + ": " + (ctx_ ? ctx_->errstr : "cannot allocate a connection");
            drop();
            return false;
        }
        if (db_ != 0) {
            auto* r = static_cast<redisReply*>(redisCommand(ctx_, "SELECT %d", db_));
            bool ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
            if (r) freeReplyObject(r);
            if (!ok) {
                error = describe() + ": SELECT " + std::to_string(db_) + " failed";
                drop();
                return false;
            }
        }
        if (was_down_) spdlog::info("prefix cache: {} is reachable again", describe());
        was_down_ = false;
        return true;
    }

    // A broken connection: closed, and not retried before the back-off has passed.
    void drop() {
        if (!was_down_) spdlog::warn("prefix cache: lost {}; its reads miss until it is back", describe());
        was_down_ = true;
        disconnect();
        retry_at_ = Clock::now() + std::chrono::milliseconds(250);
    }

    void disconnect() {
        if (ctx_ != nullptr) redisFree(ctx_);
        ctx_ = nullptr;
    }

    std::string host_;
    int port_, db_;
    timeval timeout_{};
    redisContext* ctx_ = nullptr;
    Clock::time_point retry_at_{};
    bool was_down_ = false;
};

}  // namespace

std::unique_ptr<RemoteStore> make_remote_store(const std::string& url, int timeout_ms) {
    std::smatch m;
    static const std::regex kRedis(R"(^(?:redis://)?([^:/]+)(?::(\d+))?(?:/(\d+))?$)");
    DI_CHECK(std::regex_match(url, m, kRedis), "remote store '{}': expected redis://HOST:PORT[/DB]", url);
    int port = m[2].matched ? std::stoi(m[2].str()) : 6379, db = m[3].matched ? std::stoi(m[3].str()) : 0;
    DI_CHECK(timeout_ms > 0, "remote store timeout must be positive");
    return std::make_unique<RedisStore>(m[1].str(), port, db, timeout_ms);
}

RemoteTier::RemoteTier(std::unique_ptr<RemoteStore> store, BlobLayout layout, uint64_t namespace_seed)
    : BlobTier("remote", layout, namespace_seed, 256), store_(std::move(store)) {}

RemoteTier::~RemoteTier() { stop(); }

bool RemoteTier::put_blob(const PrefixKey& key, std::span<const std::byte> blob, std::string& error) {
    return store_->put(name_of(key), blob, error);
}

bool RemoteTier::get_blob(const PrefixKey& key, std::byte* dest, int64_t capacity, int64_t& got, std::string& error) {
    return store_->get(name_of(key), dest, capacity, got, error);
}

void RemoteTier::describe(PrefixCacheTierStats& s) const {
    s.entries = s.bytes = s.capacity_bytes = -1;  // the store's own policy evicts; it is shared
}

}  // namespace deepinfer::runtime
