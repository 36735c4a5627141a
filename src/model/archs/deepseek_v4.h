#pragma once
// DeepSeek-V4 (transformers `deepseek_v4` semantics): mHC residual streams, shared-KV MQA with
// sinks over a sliding window plus HCA / CSA compressed entries (CSA picked by the lightning
// indexer), hash and top-k MoE. One forward() serves prefill, chunked prefill and decode: it takes
// any number of new tokens per sequence and continues from what the cache holds.
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4_config.h"
#include "model/deepseek_v4_weights.h"
#include "model/hybrid_cache.h"

namespace deepinfer::model {

class DeepseekV4Model final : public CausalLm {
public:
    // Loads the checkpoint in `dir` onto `backend` (config.json + safetensors).
    DeepseekV4Model(const std::string& dir, kernels::Backend& backend);
    DeepseekV4Model(DeepseekV4Config cfg, const Checkpoint& ckpt, kernels::Backend& backend);

    const DeepseekV4Config& config() const { return cfg_; }
    kernels::Backend& backend() override { return backend_; }
    int64_t vocab_size() const override { return cfg_.vocab_size; }
    const std::vector<int>& eos_token_ids() const override { return cfg_.eos_token_ids; }
    CacheSizing plan_cache(int max_seqs, int64_t memory_bytes, int block_size) const override;
    CacheSizing plan_cache_for_tokens(int max_seqs, int64_t max_tokens, int block_size = 64) const override;
    std::unique_ptr<SequenceCache> make_cache(const CacheSizing& sizing) override;

    // Runs the step and appends its tokens to `cache` (a HybridCache; blocks must be reserved for
    // every sequence up to start_pos + num_tokens). Returns fp32 logits [logit_rows, vocab] on
    // the backend's device.
    Tensor forward(const Batch& step, SequenceCache& cache) override;
    Tensor forward(const Batch& step, HybridCache& cache);

private:
    struct StepTensors;
    void attention_block(int l, StepTensors& st, HybridCache& cache);
    void compressed_keys(int l, StepTensors& st, HybridCache& cache, const Tensor& qr, kernels::EntryStore& entries,
                         kernels::AttentionArgs& args);
    void ffn_block(int l, StepTensors& st);


    DeepseekV4Config cfg_;
    kernels::Backend& backend_;
    V4Weights w_;
    kernels::Rope rope_main_, rope_compress_;
    CacheLayout cache_layout_;
};

// What a DeepSeek-V4 model caches per layer: block group 0 = CSA entries (+ indexer keys),
// group 1 = HCA entries.
CacheLayout v4_cache_layout(const DeepseekV4Config& c);

// Reads `dir`/config.json as a DeepSeek-V4 config.
DeepseekV4Config load_deepseek_v4_config(const std::string& dir);

}  // namespace deepinfer::model
