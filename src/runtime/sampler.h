#pragma once
// Chooses one token from one sequence's logits. Processing order: logit bias, repetition
// penalty (prompt + output tokens), presence / frequency penalties (output tokens), then greedy
// (temperature 0) or temperature, top-k, top-p, min-p and an inverse-CDF draw with the
// counter-based uniform of (seed, position). Candidates are ordered by probability (ties to the
// lower id) when top-k / top-p need it, else by id; either way the choice is a pure function of
// the logits and (seed, position).
// Logprobs are those of the model's raw distribution (log-softmax of the unprocessed logits).
#include <cstdint>
#include <span>
#include <vector>

#include "deepinfer/request.h"
#include "deepinfer/sampling_params.h"

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

}  // namespace deepinfer::runtime
