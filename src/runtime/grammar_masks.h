#pragma once
// Structured output in the engine. GrammarService compiles the requests' grammars for the model's
// vocabulary (cached by their text) and owns the threads that compute token masks. StepMasks holds
// the masks of one step's grammar rows: the engine submits them when it launches the step, the
// workers fill them while the step runs, and the step executor takes the ones that are done by the
// step's deadline (the moment its logits exist, plus StructuredOutputConfig::mask_deadline_ms) and
// applies them to the logits on the device. A row that missed the deadline is "late": its logits
// come back unmasked and its sequence samples once the mask is done, out of the batch.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"
#include "deepinfer/config.h"
#include "deepinfer/request.h"
#include "grammar/compiler.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::runtime {

class StepMasks {
public:
    using Clock = std::chrono::steady_clock;
    // `logit_rows`: the step's logit row of each grammar row; `words`: 32-bit words per mask.
    StepMasks(std::vector<int32_t> logit_rows, int32_t words, double deadline_ms);

    size_t size() const { return logit_rows_.size(); }
    int32_t words() const { return words_; }
    int32_t logit_row(size_t i) const { return logit_rows_[i]; }
    uint32_t* row_words(size_t i) { return bits_.data() + i * static_cast<size_t>(words_); }
    const uint32_t* row_words(size_t i) const { return bits_.data() + i * static_cast<size_t>(words_); }

    // Workers: row i is filled.
    void mark_done(size_t i);
    bool done(size_t i) const;
    bool all_done() const;
    // The executor, once the logits exist: waits for the rows until the deadline, then fixes which
    // rows are applied on the device (those done by then). Returns that choice.
    const std::vector<uint8_t>& close();
    // Whether row i's mask was applied to the step's logits (false for late rows).
    bool applied(size_t i) const { return applied_[i] != 0; }

private:
    std::vector<int32_t> logit_rows_;
    int32_t words_;
    double deadline_ms_;
    std::vector<uint32_t> bits_;  // [rows, words]
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::vector<uint8_t> done_, applied_;
    size_t num_done_ = 0;
};

// Sets logits[v] to -inf where bit v of `words` is clear (the host form of Backend::apply_token_mask).
void apply_token_mask_on_host(float* logits, int64_t vocab, const uint32_t* words);

class GrammarService {
public:
    GrammarService(std::shared_ptr<const tokenizer::Tokenizer> tokenizer, int32_t vocab_size, std::vector<int32_t> eos_ids,
                   const StructuredOutputConfig& config);
    ~GrammarService();

    // Thread-safe; the vocabulary is built on first use.
    Result<std::shared_ptr<const grammar::CompiledGrammar>> compile(const GrammarSpec& spec);
    int32_t mask_words() const { return (vocab_size_ + 31) / 32; }
    const StructuredOutputConfig& config() const { return config_; }

    // Fills row `row` of `masks` from `matcher` on a worker thread (the matcher must not be used
    // elsewhere until masks->done(row)).
    void submit(std::shared_ptr<grammar::GrammarMatcher> matcher, std::shared_ptr<StepMasks> masks, size_t row);

private:
    struct Job {
        std::shared_ptr<grammar::GrammarMatcher> matcher;
        std::shared_ptr<StepMasks> masks;
        size_t row = 0;
    };
    grammar::GrammarCompiler& compiler();
    void work();

    std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
    int32_t vocab_size_;
    std::vector<int32_t> eos_ids_;
    StructuredOutputConfig config_;
    std::once_flag vocabulary_once_;
    std::unique_ptr<grammar::GrammarCompiler> compiler_;

    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<Job> jobs_;
    int64_t jobs_started_ = 0;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace deepinfer::runtime
