#include "model/archs/hybrid_model.h"

#include "base/error.h"

namespace deepinfer::model {

CacheSizing HybridCacheModel::plan_cache(int max_seqs, int64_t memory_bytes, int block_size, int ring_slack) const {
    return cache_for_memory(cache_layout_, max_seqs, memory_bytes, block_size, ring_slack);
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

namespace {

// Steps of at most this many tokens (decode, speculative verification, short chunks) run as
// device graphs: they are many small kernels, where launches cost as much as the work.
constexpr size_t kGraphStepMaxTokens = 128;

// Opens a graph step on the backend; drops what was recorded if the forward throws.
class GraphStep {
public:
    GraphStep(kernels::Backend& backend, const Batch& step)
        : backend_(step.token_ids.size() <= kGraphStepMaxTokens ? &backend : nullptr) {
        if (backend_) backend_->execution().begin_graph_step(shape_of(step));
    }
    ~GraphStep() {
        if (backend_) backend_->execution().end_graph_step(false);
    }
    void launch() {
        if (backend_) backend_->execution().end_graph_step(true);
        backend_ = nullptr;
    }
    GraphStep(const GraphStep&) = delete;
    GraphStep& operator=(const GraphStep&) = delete;

private:
    // The tokens per sequence, hashed (FNV-1a): they fix every GEMM size of the step.
    static uint64_t shape_of(const Batch& step) {
        uint64_t h = 1469598103934665603ull;
        for (const auto& s : step.seqs) h = (h ^ static_cast<uint64_t>(s.num_tokens)) * 1099511628211ull;
        return h;
    }
    kernels::Backend* backend_;
};

}  // namespace

Tensor HybridCacheModel::forward(const Batch& step, HybridCache& cache) {
    if (!step.transfers.empty()) cache.run_transfers(step.transfers);
    Batch copy;
    GraphStep graphs(backend_, step);
    Tensor logits = forward_described(described(step, cache, copy), cache);
    graphs.launch();
    return logits;
}

}  // namespace deepinfer::model
