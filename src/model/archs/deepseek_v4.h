#pragma once
// DeepSeek-V4 (transformers `deepseek_v4` semantics): mHC residual streams, shared-KV MQA with
// sinks over a sliding window plus HCA / CSA compressed entries (CSA picked by the lightning
// indexer), hash and top-k MoE. One forward() serves prefill, chunked prefill and decode: it takes
// any number of new tokens per sequence and continues from what the cache holds.
#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4_config.h"
#include "model/deepseek_v4_weights.h"
#include "model/v4_cache.h"

namespace deepinfer::model {

// One forward step over a flat batch of new tokens from several sequences.
struct V4Step {
    std::vector<int32_t> token_ids;         // [N]
    std::vector<kernels::SeqSlice> seqs;    // state_idx = the sequence's V4Cache slot
    std::vector<int32_t> logit_rows;        // rows of the batch whose logits are returned
};

class DeepseekV4Model {
public:
    // Loads the checkpoint in `dir` onto `backend` (config.json + safetensors).
    DeepseekV4Model(const std::string& dir, kernels::Backend& backend);
    DeepseekV4Model(DeepseekV4Config cfg, const Checkpoint& ckpt, kernels::Backend& backend);

    const DeepseekV4Config& config() const { return cfg_; }
    kernels::Backend& backend() { return backend_; }

    // Runs the step and appends its tokens to `cache` (blocks must be reserved for every
    // sequence up to start_pos + num_tokens). Returns fp32 logits [logit_rows, vocab] on the
    // backend's device.
    Tensor forward(const V4Step& step, V4Cache& cache);

private:
    struct StepTensors;
    void attention_block(int l, StepTensors& st, V4Cache& cache);
    void compressed_keys(int l, StepTensors& st, V4Cache& cache, const Tensor& qr, kernels::EntryStore& entries,
                         kernels::AttentionArgs& args);
    void ffn_block(int l, StepTensors& st);
    kernels::EntryStore entry_store(const Tensor& pool, V4Cache::Group g, const V4Step& step, const V4Cache& cache) const;

    DeepseekV4Config cfg_;
    kernels::Backend& backend_;
    V4Weights w_;
    kernels::Rope rope_main_, rope_compress_;
};

// Reads `dir`/config.json as a DeepSeek-V4 config.
DeepseekV4Config load_deepseek_v4_config(const std::string& dir);

}  // namespace deepinfer::model
