#pragma once
// What the DeepSeek-V4 family's models share around their forward pass: a HybridCache described
// by the architecture's CacheLayout, sized and created here, and the step entry point that takes
// the block tables from the cache when the caller did not snapshot them.
#include <memory>

#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "model/hybrid_cache.h"

namespace deepinfer::model {

class HybridCacheModel : public CausalLm {
public:
    kernels::Backend& backend() override { return backend_; }
    CacheSizing plan_cache(int max_seqs, int64_t memory_bytes, int block_size, int ring_slack = 0) const override;
    CacheSizing plan_cache_for_tokens(int max_seqs, int64_t max_tokens, int block_size = 64) const override;
    std::unique_ptr<SequenceCache> make_cache(const CacheSizing& sizing) override;
    const CacheLayout& cache_layout() const { return cache_layout_; }

    // Runs the step and appends its tokens to `cache` (a HybridCache; blocks must be reserved for
    // every sequence up to start_pos + num_tokens). Returns fp32 logits [logit_rows, vocab] on
    // the backend's device.
    Tensor forward(const Batch& step, SequenceCache& cache) override;
    Tensor forward(const Batch& step, HybridCache& cache);

protected:
    explicit HybridCacheModel(kernels::Backend& backend) : backend_(backend) {}
    // The step with batch.block_tables filled in.
    virtual Tensor forward_described(const Batch& step, HybridCache& cache) = 0;
    // `step` itself when it carries block tables, else `copy` = step with the cache's tables
    // (single-threaded callers).
    static const Batch& described(const Batch& step, const HybridCache& cache, Batch& copy);

    kernels::Backend& backend_;
    CacheLayout cache_layout_;
};

}  // namespace deepinfer::model
