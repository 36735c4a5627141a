#pragma once
// Token sampling. Every backend's sample_rows implements the definition below (the CPU backend
// with the host sampler, kernels/cpu/cpu_sampler.h; the CUDA backend on the device), with the
// float arithmetic of kernels/sampling_math.h, so that the same logits and the same (seed,
// position) give the same token everywhere. sample_token() runs the host sampler on one row.
//
// The definition, for one row of logits l over a vocabulary of V tokens:
//  1. Processed logits z: z_i = l_i + bias_i (float); then, for a token of the prompt or the
//     output, the repetition penalty r: z_i / r when z_i > 0, else z_i · r; then, for a token
//     seen c > 0 times in the output, z_i - (frequency · c + presence). Rows with no bias and no
//     penalty state use z = l.
//  2. Greedy (temperature <= 0 or top_k == 1): the first largest z_i (ties to the lower id).
//  3. Otherwise relative probabilities e_i = sampling_exp((z_i - max z) / temperature), in
//     (0, 1] for finite logits, and integer weights w_i = floor(e_i · 2^S), S = 63 - bit_width(V),
//     W = Σ w_i (exact integers below 2^63).
//  4. The probability order: e descending, ties to the lower id. top_k (0 < k < V) keeps its
//     first k ids; top_p (< 1) keeps its shortest prefix whose weights reach
//     ceil(top_p · W) (in double arithmetic, at most W: top-p is relative to the whole
//     distribution, not to what top-k left); min_p (> 0) keeps the ids with e_i >= min_p (that
//     is, p_i >= min_p · max p). The kept set is the intersection, itself a prefix of the order.
//  5. The draw: b = the 53 Philox bits of (seed, position) (kernels/sampling_math.h), K = the
//     kept weights' sum, target = floor(b · K / 2^53); the token is the first id, in id order,
//     where the running sum of kept weights exceeds target. So token i has probability
//     w_i / K (to within 2^-53): the softmax of z / temperature restricted to the kept set, up
//     to the rounding of e (a few ulp) and the weights under 2^-S that round to 0. When K = 0
//     (no finite logit), the token is 0.
//  Logprobs are those of the raw model distribution: l_i - log Σ exp(l_j), for the chosen token
//  and, when asked, the top N raw logits (value descending, ties to the lower id).
#include <cstdint>
#include <span>
#include <vector>

#include "deepinfer/request.h"
#include "deepinfer/sampling_params.h"
#include "kernels/backend.h"

namespace deepinfer::runtime {

struct SampleInput {
    std::span<const float> logits;        // [vocab]
    const SamplingParams* params = nullptr;
    uint64_t seed = 0;
    int64_t position = 0;                 // position of the token being chosen
    std::span<const int32_t> prompt;      // for the repetition penalty
    std::span<const int32_t> output;      // tokens generated so far
};

struct SampleOutput {
    int32_t token = 0;
    float logprob = 0.0f;                // when params->logprobs >= 0
    std::vector<TokenLogprob> top;       // top N when params->logprobs > 0
};

SampleOutput sample_token(const SampleInput& in);

// The backend's row parameters for a request's sampling parameters (no penalty slot, no bias
// entries: the caller places those).
kernels::SampleRow sample_row_of(const SamplingParams& p, uint64_t seed, int64_t position);

// Whether the penalties need the sequence's token history (a row of the penalty state).
bool needs_penalty_state(const SamplingParams& p);

}  // namespace deepinfer::runtime
