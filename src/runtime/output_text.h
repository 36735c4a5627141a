#pragma once
// Turns one sequence's generated tokens into streamed text and decides when it stops: EOS / stop
// token ids, stop strings (found across token boundaries; the text from the stop string on is
// dropped), and max_tokens. Text that could still be the start of a stop string is held back
// until it cannot, and text never ends inside a UTF-8 character.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/request.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::runtime {

class OutputText {
public:
    OutputText(std::shared_ptr<const tokenizer::Tokenizer> tok, const SamplingParams& params,
               std::vector<int32_t> eos_ids);

    // Adds a generated token; returns the text that became final. Sets finish() when the
    // sequence must stop (the token that triggered it is counted but contributes no text
    // if it is a stop token id).
    std::string add(int32_t token, int num_generated);
    // Text still held back (emitted when the sequence finishes without a stop string).
    std::string flush();
    FinishReason finish() const { return finish_; }

private:
    std::string release_safe_prefix();

    tokenizer::IncrementalDecoder decoder_;
    const SamplingParams& params_;
    std::vector<int32_t> stop_ids_;
    size_t max_stop_len_ = 0;
    std::string held_;  // decoded, not yet emitted
    FinishReason finish_ = FinishReason::kNone;
};

}  // namespace deepinfer::runtime
