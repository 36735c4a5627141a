#pragma once
// DeepSeek-V4 (transformers `deepseek_v4` semantics): mHC residual streams, shared-KV MQA with
// sinks over a sliding window plus HCA / CSA compressed entries (CSA picked by the lightning
// indexer), hash and top-k MoE. One forward() serves prefill, chunked prefill and decode: it takes
// any number of new tokens per sequence and continues from what the cache holds.
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "model/archs/hybrid_model.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4_config.h"
#include "model/deepseek_v4_weights.h"
#include "model/hybrid_cache.h"

namespace deepinfer::model {

// The MTP head of a V4 checkpoint (mtp.0): S = h_proj(hnorm(streams_t)) + e_proj(enorm(embed(x_{t+1})))
// per stream, one sliding-window block, then hc_head, norm and the target's head predict x_{t+2};
// the block's output streams feed the next draft step.
struct MtpWeights {
    Tensor e_proj, h_proj;        // [D, D]
    Tensor enorm, hnorm, norm;    // [D]
    MhcWeights hc_head;
    // post = 1 and comb = I for `broadcast_rows` rows (on the backend; see mtp_broadcast_mix).
    Tensor ones_post, identity_comb;
    int64_t broadcast_rows = 0;
};

class DeepseekV4Model final : public HybridCacheModel, public DraftModel {
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
    // Loaded with LoadOptions::draft from a checkpoint with an MTP head: the head drafts, as one
    // more sliding-window layer of the cache (its window ring after the backbone's), fed with
    // each step's last-layer streams.
    DraftModel* draft_model() override { return mtp_ ? this : nullptr; }
    std::string_view draft_kind() const override { return mtp_ ? "mtp" : ""; }
    StepFeatures step_features() const override { return features_; }
    std::vector<DraftProposal> draft(const StepFeatures& features, std::span<const DraftCommit> commits,
                                     std::span<const DraftAnchor> anchors, int max_tokens, SequenceCache& cache) override;
    // The MTP head over `rows` (token_ids = each position's next token): logits [n, V]; `streams`
    // [n, hc, D] goes in (the target's, or the previous draft step's) and comes out as the block's.
    Tensor mtp_forward(const Batch& rows, Tensor& streams, HybridCache& cache);
    // Its two halves: the block (its ring takes the rows; `streams` in and out as above), and the
    // logits [m, V] of block streams [m, hc, D] (drafting wants them only for each anchor's last
    // committed row: the vocabulary product is most of a head step).
    void mtp_block(const Batch& rows, Tensor& streams, HybridCache& cache);
    Tensor mtp_logits(const Tensor& streams);
    // The mHC weights that make hc_post add one vector to every stream, for n rows.
    std::pair<Tensor, Tensor> mtp_broadcast_mix(int64_t n);

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

    void load_mtp(const WeightLoader& loader);

    DeepseekV4Config cfg_;
    V4Weights w_;
    std::unique_ptr<MtpWeights> mtp_;  // its block is w_.layers.back(), layer num_hidden_layers
    StepFeatures features_;
    kernels::Rope rope_main_, rope_compress_;
};

// What a DeepSeek-V4 model caches per layer: block group 0 = CSA entries (+ indexer keys),
// group 1 = HCA entries.
CacheLayout v4_cache_layout(const DeepseekV4Config& c);

// Reads `dir`/config.json as a DeepSeek-V4 config.
DeepseekV4Config load_deepseek_v4_config(const std::string& dir);

}  // namespace deepinfer::model
