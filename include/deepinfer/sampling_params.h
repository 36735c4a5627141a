#pragma once
// How one request's tokens are chosen and when its generation stops (the OpenAI request fields).
// Plain aggregate; validate() reports the first out-of-range field.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer {

struct SamplingParams {
    float temperature = 1.0f;  // 0 = greedy
    int top_k = 0;             // 0 = off
    float top_p = 1.0f;        // 1 = off
    float min_p = 0.0f;        // 0 = off
    float presence_penalty = 0.0f;   // OpenAI: subtracted once from tokens already generated
    float frequency_penalty = 0.0f;  // OpenAI: subtracted per occurrence in the generated text
    float repetition_penalty = 1.0f; // HF/CTRL: divides (or multiplies) logits of prompt+output tokens
    std::map<int32_t, float> logit_bias;
    std::optional<uint64_t> seed;    // samples depend only on (seed, position); unset = random seed
    int logprobs = -1;               // -1 = none; 0 = chosen token only; N = chosen + top N

    int max_tokens = 256;
    std::vector<std::string> stop;       // stop strings (not included in the output)
    std::vector<int32_t> stop_token_ids; // besides the model's EOS ids
    bool ignore_eos = false;
    bool skip_special_tokens = true;
    int n = 1;                           // independent completions of the same prompt

    // Empty when valid, else a message naming the field.
    std::string validate(int32_t vocab_size) const;
};

}  // namespace deepinfer
