#pragma once
// The host sampler: one row's token as runtime/sampler.h defines it, computed on the CPU with the
// shared arithmetic of kernels/sampling_math.h. The CPU backend's sample_rows runs it on each row;
// runtime::sample_token wraps it for one row given as spans.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kernels/backend.h"

namespace deepinfer::kernels::cpu {

struct SampledToken {
    int32_t token = 0;
    float logprob = 0.0f;                        // when row.logprobs >= 0
    std::vector<std::pair<int32_t, float>> top;  // (token, logprob) best first, when row.logprobs > 0
};

// `bias`: the row's own entries; `words`: its penalty words [vocab], or null when it has none.
SampledToken sample_row(std::span<const float> logits, const SampleRow& row, std::span<const LogitBias> bias,
                        const uint32_t* words);

// The weights runtime/sampler.h's draw picks from (steps 1, 3 and 4), one per token, 0 where a token
// is not kept; a greedy row keeps its first largest logit alone (weight 1).
std::vector<uint64_t> kept_weights(std::span<const float> logits, const SampleRow& row, std::span<const LogitBias> bias,
                                   const uint32_t* words);
// Step 5: the first id where the running sum of `weights` exceeds floor(bits53 / 2^53 * total);
// 0 when every weight is 0.
int32_t draw_weighted(std::span<const uint64_t> weights, uint64_t bits53);
// out.token's raw log-softmax into out.logprob and, for top > 0, the top `top` into out.top.
void fill_logprobs(std::span<const float> logits, int top, SampledToken& out);

// Plumbing that every host implementation of the sampling ops shares: the shape checks, the
// outputs of one row, and the penalty words of a reset.
void check_sample_args(const SampleArgs& args);
void store_sampled(const SampleArgs& args, int64_t row, const SampledToken& t);
void reset_penalty_words(uint32_t* words, int64_t vocab, std::span<const int32_t> prompt, std::span<const int32_t> output);

}  // namespace deepinfer::kernels::cpu
