#pragma once
// Speculative sampling against a draft's distribution (the rejection rule; DSpark §2.4). Draft i
// proposes tokens[i] for the position of target row i, drawn from the draft's distribution there
// (its logits under the request's sampling parameters, as runtime/sampler.h defines them). With
// p the target's distribution and q the draft's at that position, the draft is kept when
// u < p(x) / q(x); the first one that is not is replaced by a draw from max(p - q, 0),
// renormalised. So every emitted token follows p, whatever q is; the more q resembles p, the
// more drafts are kept. u and the replacement draw are keyed by (seed, position) on lanes of
// their own; but which positions one verification covers depends on the batch (token budget,
// planner), so a request's tokens can change with load while their distribution does not
// (deterministic requests keep the point-mass rule).
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"

namespace deepinfer::runtime {

// Philox lanes of a position's draws (lane 0 is the target's own sample at that position).
constexpr uint32_t kAcceptLane = 1, kResidualLane = 2;
// The draft's own draws use the request's seed xor this (an independent stream).
constexpr uint64_t kDraftSeedSalt = 0x9E3779B97F4A7C15ull;

struct DraftVerdict {
    size_t kept = 0;    // drafts kept, in order
    int32_t token = 0;  // when kept < drafts: the token drawn from max(p - q, 0) at row `kept`
};

// target[i] / draft[i]: the raw logits of target row i / draft i; rows[i]: the sampling
// parameters at row i (seed, position), the same for the draft without bias; `bias`: the
// request's logit bias. Greedy rows compare argmaxes (p and q are point masses).
// test_residual_from_target: tests only, a broken rule that redraws from p instead of max(p - q, 0).
DraftVerdict verify_draft_distribution(std::span<const std::span<const float>> target,
                                       std::span<const std::span<const float>> draft, std::span<const int32_t> tokens,
                                       std::span<const kernels::SampleRow> rows, std::span<const kernels::LogitBias> bias,
                                       bool test_residual_from_target = false);

}  // namespace deepinfer::runtime
