#pragma once
// A generation request and the events it produces.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/sampling_params.h"

namespace deepinfer {

using RequestId = uint64_t;
class PrefixSpanSink;

// Structured output: every generated token is masked so that the output stays in this language,
// and EOS is allowed only where the language allows the output to end (docs/grammar.md).
struct GrammarSpec {
    enum class Kind { kNone, kJsonSchema, kRegex, kEbnf };
    Kind kind = Kind::kNone;
    std::string text;                  // the JSON Schema (JSON text), the pattern (matched whole) or the EBNF
    bool flexible_whitespace = false;  // JSON: whitespace allowed between tokens (default: compact)
    bool format_annotations = false;   // JSON: `format` is ignored rather than enforced
    bool active() const { return kind != Kind::kNone; }
};

struct GenerationRequest {
    std::string prompt;                 // tokenized with the model's tokenizer (BOS per its config) ...
    std::vector<int32_t> prompt_tokens; // ... unless token ids are given here
    SamplingParams sampling;
    int priority = 0;                   // higher runs first; FCFS within a priority
    GrammarSpec grammar;                // structured output (none by default)
    // The same tokens and logprobs, bit for bit, whatever else the engine runs: a fixed seed when
    // none is given, and a prefix taken from the cache replays enough positions to rebuild every
    // window ring exactly. Needs a batch-invariant backend (the CPU); refused elsewhere.
    bool deterministic = false;
    // Prefill/decode disaggregation (prefill side): the prompt's cached spans are handed here as
    // they are computed or found cached (prefix_spans.h). Null = none.
    std::shared_ptr<PrefixSpanSink> span_sink;
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);

struct TokenLogprob {
    int32_t token = 0;
    float logprob = 0.0f;
};

// One streamed update for one of a request's n sequences.
struct SequenceEvent {
    int index = 0;                    // which of the n completions
    std::vector<int32_t> tokens;      // tokens added since the last event
    std::string text;                 // text added since the last event (never splits a character)
    std::vector<TokenLogprob> logprobs;                // per added token: the chosen token (when asked)
    std::vector<std::vector<TokenLogprob>> top_logprobs;  // per added token: the top N (when asked)
    FinishReason finish = FinishReason::kNone;         // set on the sequence's last event
};

struct RequestEvent {
    RequestId id = 0;
    std::vector<SequenceEvent> sequences;
    bool finished = false;     // every sequence has finished
    std::string error;         // set with FinishReason::kError
    int prompt_tokens = 0;
    // Prompt tokens taken from the prefix cache instead of being computed (the most of the
    // request's sequences); OpenAI usage.prompt_tokens_details.cached_tokens.
    int cached_tokens = 0;
    int completion_tokens = 0; // over all sequences so far
    double time_to_first_token_s = -1;  // set once the first token exists
    double queue_time_s = -1;           // arrival to the first step that computed it (once scheduled)
};

}  // namespace deepinfer
