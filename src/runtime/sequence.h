#pragma once
// One sequence being generated (a request with n > 1 has n of them). Owned by the engine thread.
//
// tokens = prompt + generated. Positions [0, num_computed) are in the model's cache; the
// remaining tokens are computed in later steps (a prompt in chunks, then one token per step).
// While a step is in flight its tokens count as `inflight` and, when that step will sample, one
// placeholder token is expected (`awaiting_sample`).
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "deepinfer/request.h"
#include "runtime/cache/prefix_key.h"
#include "runtime/grammar_masks.h"
#include "runtime/output_text.h"

namespace deepinfer::runtime {

struct RequestState;

// Structured output state of one sequence: its matcher, and a sample put off because its mask
// missed the step's deadline (the mask is row `late_row` of `late_masks`, still being computed;
// `late_logits` is the row's unmasked logits).
struct SequenceGrammar {
    std::shared_ptr<grammar::GrammarMatcher> matcher;
    // A fork of matcher that takes a step's drafts to mask the rows after them (kept between
    // steps so that its scratch is reused).
    std::unique_ptr<grammar::GrammarMatcher> draft_matcher;
    std::shared_ptr<StepMasks> late_masks;
    size_t late_row = 0;
    std::vector<float> late_logits;
};

struct Sequence {
    RequestState* request = nullptr;
    int index = 0;                   // which of the request's n completions
    uint64_t seed = 0;
    int priority = 0;
    uint64_t arrival = 0;            // FCFS order within a priority
    std::vector<int32_t> tokens;
    int prompt_len = 0;
    int64_t num_computed = 0;
    int64_t inflight = 0;            // tokens of the step in flight
    bool awaiting_sample = false;    // the step in flight samples this sequence's next token
    int cache_state = -1;            // cache slot, -1 when not resident
    int preemptions = 0;             // times it lost its cache state (runtime/penalty_slots.h)
    bool deterministic = false;      // GenerationRequest::deterministic
    bool speculative = false;        // decodes with drafts (speculative decoding is on and the request allows it)
    int64_t max_length = 0;          // prompt + max_tokens: no token is sampled at this position or later
    // A draft model's proposal for the tokens after tokens[drafted_for - 1] (valid while
    // tokens.size() == drafted_for), with its confidence per token (chance of acceptance once the
    // tokens before it were accepted).
    std::vector<int32_t> model_draft;
    std::vector<double> model_confidence;
    std::vector<std::vector<float>> model_draft_logits;  // sampled drafts: each token's distribution (logits)
    int64_t drafted_for = -1;
    // The draft model's context: its rings of cache state draft_state hold the features of
    // positions [draft_context_from, draft_context_end).
    int draft_state = -1;
    int64_t draft_context_from = 0, draft_context_end = 0;
    // After taking a shared prefix: compressed state exists below compressed_until, the window
    // rings hold nothing below window_from (its tail is recomputed from there: encoder replay).
    int64_t window_from = 0, compressed_until = 0;
    // Prefix caching: the spans of [0, indexed_until) are in the prefix index (the last one's key
    // is indexed_key); cached_tokens positions of the prompt were taken from the cache.
    int64_t indexed_until = 0;
    PrefixKey indexed_key;
    int64_t cached_tokens = 0;
    std::unique_ptr<OutputText> text;
    std::unique_ptr<SequenceGrammar> grammar;  // structured output only
    FinishReason finish = FinishReason::kNone;
    bool finished() const { return finish != FinishReason::kNone; }

    bool sample_late() const { return grammar && grammar->late_masks; }
    int num_generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
    // Tokens still to compute once the step in flight lands (its sampled token included).
    int64_t pending() const {
        return static_cast<int64_t>(tokens.size()) + (awaiting_sample ? 1 : 0) - num_computed - inflight;
    }
    int64_t length_after_inflight() const { return num_computed + inflight; }
};

}  // namespace deepinfer::runtime
