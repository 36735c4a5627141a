#include "model/archs/hybrid_model.h"

#include "base/error.h"

namespace deepinfer::model {

CacheSizing HybridCacheModel::plan_cache(int max_seqs, int64_t memory_bytes, int block_size) const {
    return cache_for_memory(cache_layout_, max_seqs, memory_bytes, block_size);
}

CacheSizing HybridCacheModel::plan_cache_for_tokens(int max_seqs, int64_t max_tokens, int block_size) const {
    return cache_for_tokens(cache_layout_, max_seqs, max_tokens, block_size);
}

std::unique_ptr<SequenceCache> HybridCacheModel::make_cache(const CacheSizing& sizing) {
    return std::make_unique<HybridCache>(cache_layout_, backend_, sizing);
}

Tensor HybridCacheModel::forward(const Batch& step, SequenceCache& cache) {
    auto* hybrid = dynamic_cast<HybridCache*>(&cache);
    DI_CHECK(hybrid != nullptr, "this model's forward needs a HybridCache");
    return forward(step, *hybrid);
}

const Batch& HybridCacheModel::described(const Batch& step, const HybridCache& cache, Batch& copy) {
    if (!step.block_tables.empty()) return step;
    copy = step;
    cache.describe(copy);
    return copy;
}

Tensor HybridCacheModel::forward(const Batch& step, HybridCache& cache) {
    Batch copy;
    return forward_described(described(step, cache, copy), cache);
}

}  // namespace deepinfer::model
