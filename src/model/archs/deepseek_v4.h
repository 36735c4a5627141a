#pragma once
// DeepSeek-V4 (transformers `deepseek_v4` semantics): mHC residual streams, shared-KV MQA with
// sinks over a sliding window plus HCA / CSA compressed entries (CSA picked by the lightning
// indexer), hash and top-k MoE. One forward() serves prefill, chunked prefill and decode: it takes
// any number of new tokens per sequence and continues from what the cache holds.
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "model/archs/hybrid_model.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4_config.h"
#include "model/deepseek_v4_weights.h"
#include "model/hybrid_cache.h"

namespace deepinfer::model {

class DeepseekV4Model final : public HybridCacheModel {
public:
    // Loads the checkpoint in `dir` onto `backend` (config.json + safetensors).
    DeepseekV4Model(const std::string& dir, kernels::Backend& backend);
    DeepseekV4Model(DeepseekV4Config cfg, const Checkpoint& ckpt, kernels::Backend& backend,
                    LoadOptions options = {});

    const DeepseekV4Config& config() const { return cfg_; }
    int64_t vocab_size() const override { return cfg_.vocab_size; }
    const std::vector<int>& eos_token_ids() const override { return cfg_.eos_token_ids; }
    int64_t max_position_embeddings() const override { return cfg_.max_position_embeddings; }
    // After a prefix hit every layer's window ring is rebuilt by replaying the prefix's tail
    // through all layers (Batch::compressed_until).
    bool rebuilds_windows() const override { return true; }
    int sliding_window() const override { return cfg_.sliding_window; }
    int exact_replay_tokens() const override { return cfg_.num_hidden_layers * (cfg_.sliding_window - 1) + 1; }

private:
    static std::vector<kernels::SeqSlice> compressor_slices(const Batch& step);
    struct StepTensors;
    Tensor forward_described(const Batch& step, HybridCache& cache) override;
    void attention_block(int l, StepTensors& st, HybridCache& cache);
    struct CompressorInputs;
    void compressor_targets(int l, int64_t n, CompressorInputs& in, std::vector<kernels::MatmulTarget>& from_x);
    void compressed_keys(int l, StepTensors& st, HybridCache& cache, CompressorInputs& in, kernels::EntryStore& entries,
                         kernels::AttentionArgs& args);
    void ffn_block(int l, StepTensors& st);
    kernels::MhcParams mhc_params() const;
    void open_site(StepTensors& st, const MhcWeights& hc, const Tensor& norm);
    void close_site(StepTensors& st, const Tensor& y, const MhcWeights* next_hc, const Tensor* next_norm);

    DeepseekV4Config cfg_;
    V4Weights w_;
    kernels::Rope rope_main_, rope_compress_;
};

// What a DeepSeek-V4 model caches per layer: block group 0 = CSA entries (+ indexer keys),
// group 1 = HCA entries.
CacheLayout v4_cache_layout(const DeepseekV4Config& c);

// Reads `dir`/config.json as a DeepSeek-V4 config.
DeepseekV4Config load_deepseek_v4_config(const std::string& dir);

}  // namespace deepinfer::model
