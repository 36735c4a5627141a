#pragma once
// DeepSeek-V4.1 (transformers main `deepseek_v41` semantics; the differences of our reference are
// listed in scripts/v41_reference.py): the V4 block with YOCO attention — only KV-source layers
// compress (ratio 2 pools token pairs, ratio 1 keeps one entry per token); later layers attend
// into the latest source's entries with the latest index source's picks; a candidate source
// narrows every later index source to its top blocks — plus the QAT fake quantisation (FP8
// window KV, FP4 entries, FP4 indexer) and delayed (single-pass) mHC without an hc head.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/archs/dspark_draft.h"
#include "model/archs/hybrid_model.h"
#include "model/checkpoint.h"
#include "model/deepseek_v41_config.h"
#include "model/deepseek_v41_weights.h"
#include "model/engram.h"
#include "model/engram_hash.h"
#include "model/hybrid_cache.h"

namespace deepinfer::model {

class DeepseekV41Model final : public HybridCacheModel {
public:
    DeepseekV41Model(const std::string& dir, kernels::Backend& backend);
    DeepseekV41Model(DeepseekV41Config cfg, const Checkpoint& ckpt, kernels::Backend& backend,
                     LoadOptions options = {});

    const DeepseekV41Config& config() const { return cfg_; }
    bool configure_swa_replay(int tokens, int rollback) override;
    bool rebuilds_windows() const override { return true; }
    int sliding_window() const override { return cfg_.base.sliding_window; }
    int exact_replay_tokens() const override { return cfg_.base.num_hidden_layers * (cfg_.base.sliding_window - 1) + 1; }
    // Encoder replay: rebuilds every layer's window ring over the step's positions from their
    // tokens alone, on top of compressed state (entries, index keys, carries) already cached
    // for them — after a prefix hit that restored only compressed KV. Windows start at each
    // slice's first position, so the rings equal a full prefill's only when the replay starts
    // at position 0; a later start is the bounded approximation.
    void rebuild_windows(const Batch& step, HybridCache& cache);
    int64_t vocab_size() const override { return cfg_.base.vocab_size; }
    const std::vector<int>& eos_token_ids() const override { return cfg_.base.eos_token_ids; }
    int64_t max_position_embeddings() const override { return cfg_.base.max_position_embeddings; }
    // Loaded with LoadOptions::draft from a checkpoint with one (else null). While it is, every
    // step records its draft's taps: the residual entering each tap layer (mean of its streams).
    DSparkDraft* dspark() { return dspark_.get(); }
    DraftModel* draft_model() override { return dspark_.get(); }
    std::string_view draft_kind() const override { return dspark_ ? "dspark" : ""; }
    StepFeatures step_features() const override { return taps_; }

private:
    struct StepState;
    Tensor forward_described(const Batch& step, HybridCache& cache) override;
    void start_step(StepState& st);
    void allocate_scratch(StepState& st);
    int first_late_layer() const;
    std::vector<int64_t> late_positions(const Batch& batch) const;
    void enter_late_layers(StepState& st, const std::vector<int64_t>& late_from);
    void hash_engram_rows(StepState& st);
    void apply_engram(int l, StepState& st);
    void load_engram(const Checkpoint& ckpt, const WeightLoader& loader);
    void enter_site(const MhcWeights& site, const Tensor& norm, StepState& st);
    void attention_block(int l, StepState& st, HybridCache& cache);
    struct SourceInputs;
    void source_targets(int l, const StepState& st, SourceInputs& in, std::vector<kernels::MatmulTarget>& from_x,
                        std::vector<kernels::MatmulTarget>& from_qr);
    void publish_source(int l, StepState& st, HybridCache& cache, const SourceInputs& in);
    void select_entries(int l, StepState& st, SourceInputs& in);
    void ffn_block(int l, StepState& st);
    Tensor final_logits(StepState& st);
    void record_tap(int l, StepState& st);
    void finish_taps(StepState& st);

    DeepseekV41Config cfg_;
    V41Weights w_;
    kernels::Rope rope_main_, rope_compress_;
    int replay_tokens_ = 0;  // SWA bounded replay (0 = off)
    std::vector<EngramLayerWeights> engram_;  // per Engram layer
    std::unique_ptr<EngramHasher> engram_hasher_;
    std::unique_ptr<DSparkDraft> dspark_;
    StepFeatures taps_;
};

// What a DeepSeek-V4.1 model caches: a window ring per layer; per KV source its entries and index
// keys (block group by ratio, the larger ratio first) and, for ratio > 1, the unpooled tokens.
CacheLayout v41_cache_layout(const DeepseekV41Config& c);

DeepseekV41Config load_deepseek_v41_config(const std::string& dir);

}  // namespace deepinfer::model
