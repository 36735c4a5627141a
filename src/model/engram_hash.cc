#include "model/engram_hash.h"

#include <limits>
#include <set>

#include "base/error.h"

namespace deepinfer::model {
namespace {

using u128 = unsigned __int128;

// numpy's SeedSequence (pool of four 32-bit words) for a single 32-bit entropy word.
std::vector<uint32_t> seed_sequence_state(uint32_t entropy, int words) {
    constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
    constexpr uint32_t kMixL = 0xca01f9dd, kMixR = 0x4973f715;
    uint32_t hash_const = kInitA;
    auto hashmix = [&](uint32_t v) {
        v ^= hash_const;
        hash_const *= kMultA;
        v *= hash_const;
        return v ^ (v >> 16);
    };
    auto mix = [](uint32_t x, uint32_t y) {
        uint32_t r = kMixL * x - kMixR * y;
        return r ^ (r >> 16);
    };
    uint32_t pool[4];
    for (int i = 0; i < 4; ++i) pool[i] = hashmix(i == 0 ? entropy : 0);
    for (int src = 0; src < 4; ++src)
        for (int dst = 0; dst < 4; ++dst)
            if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
    std::vector<uint32_t> out(words);
    uint32_t hb = kInitB;
    for (int i = 0; i < words; ++i) {
        uint32_t v = pool[i % 4] ^ hb;
        hb *= kMultB;
        v *= hb;
        out[i] = v ^ (v >> 16);
    }
    return out;
}

// numpy's PCG64 (128-bit LCG, XSL-RR output), seeded as PCG64(SeedSequence(seed)).
class Pcg64 {
public:
    explicit Pcg64(uint32_t seed) {
        std::vector<uint32_t> w = seed_sequence_state(seed, 8);
        auto u64 = [&](int i) { return static_cast<uint64_t>(w[2 * i]) | static_cast<uint64_t>(w[2 * i + 1]) << 32; };
        u128 init_state = static_cast<u128>(u64(0)) << 64 | u64(1), init_seq = static_cast<u128>(u64(2)) << 64 | u64(3);
        inc_ = init_seq << 1 | 1;
        step();
        state_ += init_state;
        step();
    }
    uint64_t next() {
        step();
        uint64_t x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
        unsigned rot = static_cast<unsigned>(state_ >> 122);
        return (x >> rot) | (x << ((64 - rot) & 63));
    }

private:
    void step() {
        const u128 mult = static_cast<u128>(0x2360ED051FC65DA4ULL) << 64 | 0x4385DF649FCCF645ULL;
        state_ = state_ * mult + inc_;
    }
    u128 state_ = 0, inc_ = 0;
};

bool is_prime(int64_t n) {
    if (n < 2) return false;
    for (int64_t d = 2; d * d <= n; ++d)
        if (n % d == 0) return false;
    return true;
}

}  // namespace

std::vector<int64_t> numpy_default_rng_integers(uint64_t seed, int64_t high, int count) {
    DI_CHECK(seed <= 0xFFFFFFFFu && high > (INT64_C(1) << 32), "engram: multiplier draw outside the reproduced range");
    Pcg64 rng(static_cast<uint32_t>(seed));
    uint64_t range_excl = static_cast<uint64_t>(high);  // Lemire's method on [0, high)
    std::vector<int64_t> out;
    for (int i = 0; i < count; ++i) {
        u128 m = static_cast<u128>(rng.next()) * range_excl;
        uint64_t leftover = static_cast<uint64_t>(m);
        if (leftover < range_excl) {
            uint64_t threshold = (std::numeric_limits<uint64_t>::max() - (range_excl - 1)) % range_excl;
            while (leftover < threshold) {
                m = static_cast<u128>(rng.next()) * range_excl;
                leftover = static_cast<uint64_t>(m);
            }
        }
        out.push_back(static_cast<int64_t>(m >> 64));
    }
    return out;
}

EngramHasher::EngramHasher(const EngramConfig& cfg, std::vector<int32_t> token_map)
    : cfg_(cfg), token_map_(std::move(token_map)) {
    DI_CHECK(cfg.pad_id >= 0 && cfg.pad_id < static_cast<int>(token_map_.size()), "engram: pad id {} is not a token",
             cfg.pad_id);
    pad_class_ = token_map_[cfg.pad_id];
    std::set<int64_t> seen;
    int64_t bound = std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / cfg.compressed_vocab_size) / 2);
    for (size_t li = 0; li < cfg.layer_ids.size(); ++li) {
        std::vector<int64_t> primes, offsets;
        int64_t total = 0;
        for (int n = 1; n < cfg.max_ngram_size; ++n) {
            int64_t current = cfg.vocab_size - 1;
            for (int h = 0; h < cfg.n_heads; ++h) {
                do ++current;
                while (!is_prime(current) || seen.count(current));
                seen.insert(current);
                primes.push_back(current);
                offsets.push_back(total);
                total += current;
            }
        }
        DI_CHECK(total == cfg.num_embeddings[li], "engram: layer {} table has {} rows, its prime buckets need {}",
                 cfg.layer_ids[li], cfg.num_embeddings[li], total);
        primes_.push_back(primes);
        offsets_.push_back(offsets);
        std::vector<int64_t> m = numpy_default_rng_integers(10007ull * cfg.layer_ids[li], bound, cfg.max_ngram_size);
        for (auto& v : m) v = v * 2 + 1;  // odd, and small enough that id * m cannot overflow
        multipliers_.push_back(m);
    }
}

int32_t EngramHasher::compressed(int32_t token) const {
    DI_CHECK(token >= 0 && token < static_cast<int32_t>(token_map_.size()), "engram: token {} is outside the tokenizer",
             token);
    return token_map_[token];
}

void EngramHasher::rows(std::span<const int32_t> window, int64_t* out) const {
    int cols = cfg_.columns();
    for (size_t li = 0; li < multipliers_.size(); ++li) {
        const std::vector<int64_t>& mult = multipliers_[li];
        auto class_at = [&](int k) -> int64_t { return window[k] < 0 ? pad_class_ : compressed(window[k]); };
        int64_t rolling = class_at(0) * mult[0];
        for (int n = 1; n < cfg_.max_ngram_size; ++n) {
            rolling ^= class_at(n) * mult[n];
            for (int h = 0; h < cfg_.n_heads; ++h) {
                int c = (n - 1) * cfg_.n_heads + h;
                out[li * cols + c] = rolling % primes_[li][c] + offsets_[li][c];
            }
        }
    }
}

}  // namespace deepinfer::model
