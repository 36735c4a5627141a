#include "tokenizer/bpe.h"

#include <queue>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {
namespace {

constexpr size_t kCacheEntries = 1 << 16;
constexpr size_t kCacheMaxPieceBytes = 64;

struct ByteTables {
    std::array<std::string, 256> chars;
    std::unordered_map<uint32_t, int> bytes;
    ByteTables() {
        int extra = 0;
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            uint32_t cp = printable ? static_cast<uint32_t>(b) : 256u + extra++;
            append_utf8(chars[b], cp);
            bytes[cp] = b;
        }
    }
};

const ByteTables& tables() {
    static const ByteTables t;
    return t;
}

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

}  // namespace

const std::array<std::string, 256>& byte_to_chars() { return tables().chars; }

int char_to_byte(uint32_t cp) {
    auto it = tables().bytes.find(cp);
    return it == tables().bytes.end() ? -1 : it->second;
}

Bpe::Bpe(const nlohmann::json& model) {
    DI_CHECK(model.value("type", "BPE") == "BPE", "tokenizer.json: model type '{}' is not supported (BPE)",
             model.value("type", ""));
    DI_CHECK(!model.value("byte_fallback", false), "tokenizer.json: BPE byte_fallback is not supported");
    for (const auto& [tok, id] : model.at("vocab").items()) {
        int32_t i = id.get<int32_t>();
        DI_CHECK(i >= 0, "tokenizer.json: negative token id for '{}'", tok);
        vocab_[tok] = i;
        if (static_cast<size_t>(i) >= id_to_token_.size()) id_to_token_.resize(i + 1);
        id_to_token_[i] = tok;
    }
    int32_t rank = 0;
    for (const auto& m : model.at("merges")) {
        std::string left, right;
        if (m.is_array()) {
            left = m.at(0).get<std::string>();
            right = m.at(1).get<std::string>();
        } else {
            std::string s = m.get<std::string>();
            size_t sp = s.find(' ', 1);
            DI_CHECK(sp != std::string::npos, "tokenizer.json: malformed merge '{}'", s);
            left = s.substr(0, sp);
            right = s.substr(sp + 1);
        }
        auto a = vocab_.find(left), b = vocab_.find(right), ab = vocab_.find(left + right);
        DI_CHECK(a != vocab_.end() && b != vocab_.end() && ab != vocab_.end(),
                 "tokenizer.json: merge '{} {}' uses tokens outside the vocabulary", left, right);
        merges_.emplace(pair_key(a->second, b->second), std::make_pair(rank++, ab->second));
    }
    for (int byte = 0; byte < 256; ++byte) {
        auto it = vocab_.find(byte_to_chars()[byte]);
        DI_CHECK(it != vocab_.end(), "tokenizer.json: byte {} has no byte-level token", byte);
        byte_ids_[byte] = it->second;
    }
}

const std::string& Bpe::token(int32_t id) const {
    static const std::string kEmpty;
    return id >= 0 && static_cast<size_t>(id) < id_to_token_.size() ? id_to_token_[id] : kEmpty;
}

std::optional<int32_t> Bpe::id_of(std::string_view token) const {
    auto it = vocab_.find(std::string(token));
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
}

void Bpe::merge(std::vector<int32_t>& ids) const {
    int n = static_cast<int>(ids.size());
    std::vector<int> next(n), prev(n);
    std::vector<char> alive(n, 1);
    for (int i = 0; i < n; ++i) {
        next[i] = i + 1 < n ? i + 1 : -1;
        prev[i] = i - 1;
    }
    using Item = std::pair<int32_t, int>;  // (rank, left position): lowest rank, then leftmost
    std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
    auto push = [&](int left) {
        if (left < 0 || next[left] < 0) return;
        auto it = merges_.find(pair_key(ids[left], ids[next[left]]));
        if (it != merges_.end()) queue.emplace(it->second.first, left);
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    while (!queue.empty()) {
        auto [rank, left] = queue.top();
        queue.pop();
        if (!alive[left] || next[left] < 0) continue;
        auto it = merges_.find(pair_key(ids[left], ids[next[left]]));
        if (it == merges_.end() || it->second.first != rank) continue;  // stale entry
        int right = next[left];
        ids[left] = it->second.second;
        alive[right] = 0;
        next[left] = next[right];
        if (next[left] >= 0) prev[next[left]] = left;
        push(prev[left]);
        push(left);
    }
    int out = 0;
    for (int i = 0; i < n; ++i)
        if (alive[i]) ids[out++] = ids[i];
    ids.resize(out);
}

void Bpe::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
    bool cacheable = bytes.size() <= kCacheMaxPieceBytes;
    std::string key;
    if (cacheable) {
        key.assign(bytes);
        std::lock_guard<std::mutex> lock(cache_mutex_);
        auto it = cache_.find(key);
        if (it != cache_.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    std::vector<int32_t> ids(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) ids[i] = byte_ids_[static_cast<uint8_t>(bytes[i])];
    merge(ids);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        if (cache_.size() >= kCacheEntries) cache_.clear();
        cache_.emplace(std::move(key), std::move(ids));
    }
}

}  // namespace deepinfer::tokenizer
