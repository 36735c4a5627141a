#pragma once
// Masks of whole matcher configurations (the exact set of stacks), shared by every matcher of one
// compiled grammar: a sequence revisits states (inside a string, between array items) and
// sequences decoding with the same schema visit the same ones. Only masks that took a long walk
// are kept, compressed (a list of allowed or of forbidden ids when short), up to a byte budget;
// past it nothing new is kept. Thread-safe.
#include <cstdint>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace deepinfer::grammar {

class MaskCache {
public:
    explicit MaskCache(size_t max_bytes) : max_bytes_(max_bytes) {}

    // Fills `words` (num_words of them) and returns true when the configuration's mask is known.
    bool lookup(const std::vector<int32_t>& configuration, uint32_t* words, int32_t num_words) const;
    void store(const std::vector<int32_t>& configuration, const uint32_t* words, int32_t num_words);

private:
    enum class Form : uint8_t { kAllowed, kForbidden, kBits };
    struct Entry {
        Form form;
        std::vector<uint32_t> data;
    };
    static std::string key_of(const std::vector<int32_t>& configuration) {
        return std::string(reinterpret_cast<const char*>(configuration.data()), configuration.size() * sizeof(int32_t));
    }

    mutable std::shared_mutex mutex_;
    std::unordered_map<std::string, Entry> entries_;
    size_t bytes_ = 0;
    size_t max_bytes_;
};

}  // namespace deepinfer::grammar
