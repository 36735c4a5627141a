#pragma once
// The DSpark draft model of a DeepSeek-V4.1 checkpoint (tensors mtp.*; the forward is stated in
// scripts/dspark_reference.py, its PyTorch reference). Committed tokens' target features (the
// residual entering the tap layers) become per-layer context keys in the draft's own rings; one
// forward of the draft blocks over [anchor, noise x (T - 1)] gives T - 1 base logit rows, which
// the Markov head corrects left to right from the previous token; the confidence head estimates
// each draft's chance of acceptance.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "model/checkpoint.h"
#include "model/deepseek_v41_config.h"
#include "model/deepseek_v4_weights.h"
#include "model/weight_loader.h"

namespace deepinfer::model {

struct DSparkWeights {
    Tensor main_proj, main_norm;          // [D, taps * D], [D]
    std::vector<V4LayerWeights> layers;   // mtp.0 .. mtp.{L-1}
    Tensor norm;                          // [D] (the last layer's)
    Tensor markov_embed, markov_head;     // W1, W2 [V, rank]
    Tensor confidence_hidden, confidence_prev;  // the confidence projection split: [1, D], [1, rank]
    float confidence_bias = 0.0f;
};

// The block forward's outputs for the T - 1 draft rows of each anchor, anchor-major.
struct DraftBlock {
    Tensor base_logits;  // [S * (T - 1), V]: head(norm(hidden))
    Tensor hidden;       // [S * (T - 1), D]: pre-norm (what the confidence head reads)
};

class DSparkDraft final : public DraftModel {
public:
    // embed / head: the target's (the draft shares them).
    DSparkDraft(const DeepseekV41Config& cfg, Tensor embed, Tensor head, const WeightLoader& loader,
                kernels::Backend& backend);

    const DSparkConfig& config() const { return cfg_.dspark; }
    int drafts_per_block() const { return cfg_.dspark.block_size - 1; }
    // Context rings for `num_states` sequences (the target cache's state rows); drops what they held.
    void allocate(int num_states) override;
    // commit() of the commits' rows, then propose().
    std::vector<DraftProposal> draft(const StepFeatures& features, std::span<const DraftCommit> commits,
                                     std::span<const DraftAnchor> anchors, int max_tokens, SequenceCache& cache) override;
    int num_states() const { return num_states_; }
    // Context keys of committed tokens: slice s's rows of `taps` [N, taps * D] are the features of
    // its positions start_pos ... (only the last `sliding_window` of a sequence are kept).
    void commit(std::span<const kernels::SeqSlice> seqs, const Tensor& taps);
    DraftBlock forward(std::span<const DraftAnchor> anchors);
    // forward(), then the Markov head left to right for up to max_tokens tokens, each chosen as its
    // anchor's sampling says.
    std::vector<DraftProposal> propose(std::span<const DraftAnchor> anchors, int max_tokens);
    // Markov correction: logits [S, V] += W2 · W1[prev] in place; returns W1[prev] [S, rank].
    Tensor markov(Tensor& logits, std::span<const int32_t> prev);
    // sigmoid(w · [hidden ; W1[prev]] + b) per row, from markov()'s W1[prev].
    std::vector<float> confidence(const Tensor& hidden, const Tensor& prev_embed);

private:
    struct Block;
    void enter_site(const MhcWeights& site, const Tensor& norm, Block& b);
    void attention(int layer, Block& b);
    void feed_forward(int layer, Block& b);

    DeepseekV41Config cfg_;
    DeepseekV4Config layer_cfg_;  // the draft layers' shapes (their own expert count and top-k)
    kernels::Backend& backend_;
    Tensor embed_, head_;
    DSparkWeights w_;
    kernels::Rope rope_;
    std::vector<Tensor> rings_;  // per layer [states, window, head_dim]
    int num_states_ = 0;
};

}  // namespace deepinfer::model
