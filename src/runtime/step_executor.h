#pragma once
// Runs model forward steps on a thread of its own, so the engine thread can plan the next step
// (and sample / stream the previous one) while a step runs. One step in flight at a time.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "base/trace.h"
#include "model/causal_lm.h"
#include "runtime/grammar_masks.h"

namespace deepinfer::runtime {

// A step's sampling, one row per logit row (kernels::Backend::sample_rows): the rows'
// parameters and logit biases, and the penalty-state rows whose history is (re)written first.
struct PenaltyReset {
    int32_t slot = 0;
    std::vector<int32_t> prompt, output;
};

struct SampleJob {
    std::vector<kernels::SampleRow> rows;
    std::vector<kernels::LogitBias> bias;
    std::vector<PenaltyReset> resets;
    std::vector<int32_t> raw_rows;  // logit rows whose raw logits come back (StepOutput::raw_logits)
};

// What a step brings back to the host: each logit row's token, sampled where the logits are, and
// the logprobs its row asked for; nothing that grows with the vocabulary, except for a grammar row
// whose mask missed the step's deadline: its unmasked logits come back in late_logits, for
// sampling on the host once its mask is done (that row's device token is not used, nor counted
// in its penalty row).
struct StepOutput {
    std::vector<int32_t> tokens;        // [rows]
    std::vector<float> logprobs;        // [rows] when some row asks for logprobs, else empty
    std::vector<int32_t> top_tokens;    // [rows, top_width], best first
    std::vector<float> top_logprobs;    // [rows, top_width]
    int top_width = 0;                  // the most top logprobs a row asks for
    std::shared_ptr<StepMasks> masks;             // the step's grammar rows (null when none)
    std::vector<std::vector<float>> late_logits;  // per grammar row: [vocab] when late, else empty
    double seconds = 0;                           // the step's forward and sampling
    model::StepFeatures features;                 // what the model's draft reads of the step (if it has one)
    std::vector<std::vector<float>> raw_logits;   // per SampleJob::raw_rows: [vocab]
};

class StepExecutor {
public:
    // `trace` (may be disabled, not null) records each step's forward and sampling;
    // `penalty_slots` rows of penalty state are allocated when a job first needs them.
    StepExecutor(model::CausalLm& model, model::SequenceCache& cache, TraceRecorder* trace, int penalty_slots);
    ~StepExecutor();

    // Starts `batch`, applies `masks` (may be null) to its logits, then samples its logit rows as
    // `job` says; the tokens come back from wait().
    void launch(model::Batch batch, SampleJob job, std::shared_ptr<StepMasks> masks = nullptr);
    // Blocks until the step in flight is done. Rethrows a failure of the step.
    StepOutput wait();

private:
    void loop();
    StepOutput run(model::Batch& batch, SampleJob& job, std::shared_ptr<StepMasks> masks);
    // Waits for the masks until their deadline, applies those that are done, and lists the rest.
    std::vector<int32_t> apply_masks(Tensor& logits, StepMasks& masks);
    void sample(const Tensor& logits, const SampleJob& job, StepOutput& out);
    void download_late_rows(const Tensor& logits, const StepMasks& masks, const std::vector<int32_t>& late, StepOutput& out);
    std::vector<std::vector<float>> download_rows(const Tensor& logits, std::span<const int32_t> rows);

    model::CausalLm& model_;
    model::SequenceCache& cache_;
    TraceRecorder* trace_;
    std::mutex mutex_;
    std::condition_variable cv_;
    model::Batch batch_;
    SampleJob job_;
    std::shared_ptr<StepMasks> masks_;
    int penalty_slots_;
    Tensor penalty_state_;  // [penalty_slots_, vocab] int32 on the device, once a job needs it
    StepOutput output_;
    std::exception_ptr error_;
    bool has_job_ = false, done_ = false, stop_ = false;
    std::thread thread_;
};

}  // namespace deepinfer::runtime
