#include "grammar/mask_cache.h"

#include <bit>
#include <cstring>
#include <mutex>

namespace deepinfer::grammar {

bool MaskCache::lookup(const std::vector<int32_t>& configuration, uint32_t* words, int32_t num_words) const {
    std::shared_lock lock(mutex_);
    auto it = entries_.find(key_of(configuration));
    if (it == entries_.end()) return false;
    const Entry& e = it->second;
    switch (e.form) {
        case Form::kBits:
            std::memcpy(words, e.data.data(), sizeof(uint32_t) * num_words);
            break;
        case Form::kAllowed:
            std::memset(words, 0, sizeof(uint32_t) * num_words);
            for (uint32_t id : e.data) words[id >> 5] |= 1u << (id & 31);
            break;
        case Form::kForbidden:
            std::memset(words, 0xFF, sizeof(uint32_t) * num_words);
            for (uint32_t id : e.data) words[id >> 5] &= ~(1u << (id & 31));
            break;
    }
    return true;
}

void MaskCache::store(const std::vector<int32_t>& configuration, const uint32_t* words, int32_t num_words) {
    int64_t allowed = 0;
    for (int32_t w = 0; w < num_words; ++w) allowed += std::popcount(words[w]);
    int64_t forbidden = int64_t{32} * num_words - allowed;
    Entry e;
    if (allowed <= num_words || forbidden <= num_words) {
        bool list_allowed = allowed <= forbidden;
        e.form = list_allowed ? Form::kAllowed : Form::kForbidden;
        for (int32_t w = 0; w < num_words; ++w)
            for (uint32_t bits = list_allowed ? words[w] : ~words[w]; bits; bits &= bits - 1)
                e.data.push_back(uint32_t(w) * 32 + std::countr_zero(bits));
    } else {
        e.form = Form::kBits;
        e.data.assign(words, words + num_words);
    }
    std::string key = key_of(configuration);
    size_t size = key.size() + e.data.size() * sizeof(uint32_t);
    std::unique_lock lock(mutex_);
    if (bytes_ + size > max_bytes_ || entries_.count(key)) return;
    bytes_ += size;
    entries_.emplace(std::move(key), std::move(e));
}

}  // namespace deepinfer::grammar
