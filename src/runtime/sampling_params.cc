#include "deepinfer/sampling_params.h"

#include <cmath>
#include <string>

namespace deepinfer {

std::string SamplingParams::validate(int32_t vocab_size) const {
    auto finite = [](float v) { return std::isfinite(v); };
    if (!finite(temperature) || temperature < 0.0f) return "temperature must be >= 0";
    if (top_k < 0) return "top_k must be >= 0 (0 disables it)";
    if (!finite(top_p) || top_p <= 0.0f || top_p > 1.0f) return "top_p must be in (0, 1]";
    if (!finite(min_p) || min_p < 0.0f || min_p > 1.0f) return "min_p must be in [0, 1]";
    if (!finite(presence_penalty) || presence_penalty < -2.0f || presence_penalty > 2.0f)
        return "presence_penalty must be in [-2, 2]";
    if (!finite(frequency_penalty) || frequency_penalty < -2.0f || frequency_penalty > 2.0f)
        return "frequency_penalty must be in [-2, 2]";
    if (!finite(repetition_penalty) || repetition_penalty <= 0.0f) return "repetition_penalty must be > 0";
    for (const auto& [tok, bias] : logit_bias) {
        if (tok < 0 || tok >= vocab_size) return "logit_bias token " + std::to_string(tok) + " is out of range";
        if (!finite(bias) || bias < -100.0f || bias > 100.0f) return "logit_bias values must be in [-100, 100]";
    }
    if (logprobs < -1 || logprobs > 20) return "logprobs must be between 0 and 20";
    if (max_tokens < 1) return "max_tokens must be >= 1";
    if (n < 1 || n > 128) return "n must be between 1 and 128";
    for (const auto& s : stop)
        if (s.empty()) return "stop strings must not be empty";
    if (stop.size() > 16) return "at most 16 stop strings";
    for (int32_t t : stop_token_ids)
        if (t < 0 || t >= vocab_size) return "stop token id " + std::to_string(t) + " is out of range";
    return {};
}

}  // namespace deepinfer
