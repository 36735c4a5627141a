#pragma once
// Speculative decoding's drafters: each proposes tokens to follow a sequence, which one step of
// the target model then verifies (runtime/engine_speculative.cc keeps what the target's own
// sampling confirms). A drafter only guesses; a bad guess costs compute, never correctness.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "deepinfer/config.h"

namespace deepinfer::runtime {

class Drafter {
public:
    virtual ~Drafter() = default;
    // Up to `max_tokens` tokens likely to follow `tokens` (the sequence so far); may be empty.
    virtual std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) const = 0;
};

// Prompt lookup: the sequence's last n tokens (n from ngram_max down to ngram_min) are looked up
// among its earlier tokens, and what followed their latest earlier occurrence is proposed. Code
// edits, quotes and repeated structure copy well; free text rarely.
class NgramDrafter final : public Drafter {
public:
    NgramDrafter(int ngram_min, int ngram_max);
    std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) const override;

private:
    int ngram_min_, ngram_max_;
};

// Drafts from a draft model that the engine runs after every step (DSpark, MTP): the scheduler takes
// them from Sequence::model_draft; this drafter proposes nothing on its own.
class ModelDrafter final : public Drafter {
public:
    std::vector<int32_t> propose(std::span<const int32_t>, int) const override { return {}; }
};

// The drafter `config` gives or names; null when speculation is off. Throws deepinfer::Error for
// an unknown method or bad lengths.
std::shared_ptr<const Drafter> make_drafter(const SpeculativeConfig& config);

}  // namespace deepinfer::runtime
