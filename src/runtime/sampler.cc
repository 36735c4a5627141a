#include "runtime/sampler.h"

#include "kernels/cpu/cpu_sampler.h"

namespace deepinfer::runtime {

kernels::SampleRow sample_row_of(const SamplingParams& p, uint64_t seed, int64_t position) {
    kernels::SampleRow row;
    row.temperature = p.temperature;
    row.top_k = p.top_k;
    row.top_p = p.top_p;
    row.min_p = p.min_p;
    row.repetition_penalty = p.repetition_penalty;
    row.presence_penalty = p.presence_penalty;
    row.frequency_penalty = p.frequency_penalty;
    row.seed = seed;
    row.position = position;
    row.logprobs = p.logprobs;
    return row;
}

bool needs_penalty_state(const SamplingParams& p) {
    return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

SampleOutput sample_token(const SampleInput& in) {
    const SamplingParams& p = *in.params;
    std::vector<kernels::LogitBias> bias;
    for (const auto& [token, value] : p.logit_bias) bias.push_back({token, value});
    std::vector<uint32_t> words;
    if (needs_penalty_state(p)) {
        words.resize(in.logits.size());
        kernels::cpu::reset_penalty_words(words.data(), static_cast<int64_t>(words.size()), in.prompt, in.output);
    }
    kernels::cpu::SampledToken t = kernels::cpu::sample_row(in.logits, sample_row_of(p, in.seed, in.position), bias,
                                                            words.empty() ? nullptr : words.data());
    SampleOutput out{t.token, t.logprob, {}};
    for (const auto& [token, logprob] : t.top) out.top.push_back({token, logprob});
    return out;
}

}  // namespace deepinfer::runtime
