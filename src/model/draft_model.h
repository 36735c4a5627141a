#pragma once
// A draft model the engine runs after every step for speculative decoding (DSpark of
// DeepSeek-V4.1, the MTP head of DeepSeek-V4): it reads what the target computed for the
// positions a step committed (StepFeatures) and proposes tokens to follow each sequence's last one.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"

namespace deepinfer::model {

class SequenceCache;

// What a draft model reads of a target step, per row (DSpark: the residual entering its tap
// layers, [n, taps * D]; MTP: the last layer's streams, [n, hc * D]) and the slices its rows
// belong to: only each slice's last positions a draft reads (its context window), and bounded
// replay keeps only a prompt's tail.
struct StepFeatures {
    Tensor rows;
    std::vector<kernels::SeqSlice> seqs;
};


// One sequence's newly committed positions: its rows of the step's features (token_begin,
// num_tokens, start_pos, state_idx; window_from = where its draft context starts) and the token
// that follows each position.
struct DraftCommit {
    kernels::SeqSlice rows;
    std::vector<int32_t> next_tokens;
};

// A sequence to draft for: its last token at `position` (the first position the target has not
// computed); the draft context holds positions [context_from, position).
struct DraftAnchor {
    int32_t state = 0;
    int32_t token = 0;
    int64_t position = 0;
    int64_t context_from = 0;
    // How draft tokens are chosen: greedy (temperature <= 0) takes each row's argmax, else a draw
    // with these parameters at the draft's position (seed: the draft's own stream).
    kernels::SampleRow sampling = {0.0f};
};

// One anchor's draft, the draft model's estimate of each token's chance of acceptance (empty when
// it has none), and for sampled drafts the logits each token was drawn from (its distribution,
// for the rejection rule).
struct DraftProposal {
    std::vector<int32_t> tokens;
    std::vector<double> confidence;
    std::vector<std::vector<float>> logits;
};

// Draft k (0-based) of every anchor from its logits [S, V] (at position anchor.position + 1 + k),
// chosen as the anchor's sampling says, into `prev` and out[s].tokens; sampled anchors also keep
// the logits row they drew from.
void choose_draft_tokens(kernels::Backend& backend, std::span<const DraftAnchor> anchors, int64_t k,
                         const Tensor& logits, std::vector<int32_t>& prev, std::vector<DraftProposal>& out);

// The rows of the last `keep` positions of each slice, in order; `renumbered`: the slices over them.
std::vector<int32_t> last_rows(std::span<const kernels::SeqSlice> seqs, int keep,
                               std::vector<kernels::SeqSlice>& renumbered);
// The rows of `rows` [n, width] in the last `keep` positions of each slice, with the slices
// renumbered over them; `rows` and `seqs` as they are when nothing is dropped.
StepFeatures last_rows_of(kernels::Backend& backend, const Tensor& rows, std::span<const kernels::SeqSlice> seqs,
                          int keep);

class DraftModel {
public:
    virtual ~DraftModel() = default;
    // State for `num_states` sequences (the target cache's state rows), when it keeps its own.
    virtual void allocate(int /*num_states*/) {}
    // Takes the commits' features into the draft's context, then drafts up to `max_tokens`
    // tokens per anchor (each anchor's context must end with a commit of this call).
    virtual std::vector<DraftProposal> draft(const StepFeatures& features, std::span<const DraftCommit> commits,
                                             std::span<const DraftAnchor> anchors, int max_tokens,
                                             SequenceCache& cache) = 0;
};

}  // namespace deepinfer::model
