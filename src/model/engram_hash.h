#pragma once
// DeepSeek-V4.1 Engram hashing: which table rows a position's n-grams select. Reproduces the
// transformers reference bit for bit — per-layer multipliers drawn from numpy's
// default_rng(10007 * layer) (SeedSequence + PCG64 + Lemire bounded integers), prime bucket
// sizes drawn upward from engram_vocab_size, a rolling XOR of the multiplied compressed ids.
#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer::model {

struct EngramConfig {
    std::vector<int> layer_ids;
    int max_ngram_size = 4;
    int n_heads = 8;
    int head_dim = 256;
    int64_t vocab_size = 0;                // table rows per (n-gram, head) start above this
    std::vector<int64_t> num_embeddings;   // per Engram layer: rows of its table
    int64_t compressed_vocab_size = 0;     // classes of the tokenizer-derived token map
    int pad_id = 2;                        // token whose class fills look-back before position 0
    int columns() const { return (max_ngram_size - 1) * n_heads; }
};

// numpy.random.default_rng(seed).integers(0, high, size=count, dtype=int64) for high > 2^32.
std::vector<int64_t> numpy_default_rng_integers(uint64_t seed, int64_t high, int count);

class EngramHasher {
public:
    EngramHasher(const EngramConfig& cfg, std::vector<int32_t> token_map);

    // Rows [layers][columns] selected at the position whose token and look-back are
    // `window[0]` (this token), window[1] (the one before), ...; -1 = before the sequence start.
    void rows(std::span<const int32_t> window, int64_t* out) const;
    int32_t compressed(int32_t token) const;
    const std::vector<std::vector<int64_t>>& primes() const { return primes_; }  // [layer][n-gram * head]
    const std::vector<std::vector<int64_t>>& multipliers() const { return multipliers_; }

private:
    EngramConfig cfg_;
    std::vector<int32_t> token_map_;
    int32_t pad_class_ = 0;
    std::vector<std::vector<int64_t>> primes_, offsets_, multipliers_;
};

}  // namespace deepinfer::model
