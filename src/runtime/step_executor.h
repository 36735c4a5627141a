#pragma once
// Runs model forward steps on a thread of its own, so the engine thread can plan the next step
// (and sample / stream the previous one) while a step runs. One step in flight at a time.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "base/trace.h"
#include "model/causal_lm.h"
#include "runtime/grammar_masks.h"

namespace deepinfer::runtime {

// What a step brings back to the host: the logit rows when some row is sampled on the host,
// each row's argmax (computed where the logits are) when some row is greedy. Rows with a grammar
// mask that was ready by the step's deadline come back masked (logits and argmax); a late row's
// logits come back unmasked in late_logits, for sampling once its mask is done.
struct StepOutput {
    std::vector<float> logits;   // [rows * vocab] or empty
    std::vector<int32_t> argmax; // [rows] or empty
    std::shared_ptr<StepMasks> masks;             // the step's grammar rows (null when none)
    std::vector<std::vector<float>> late_logits;  // per grammar row: [vocab] when late, else empty
};

class StepExecutor {
public:
    // `trace` (may be disabled, not null) records each step's forward and download.
    StepExecutor(model::CausalLm& model, model::SequenceCache& cache, TraceRecorder* trace);
    ~StepExecutor();

    // Starts `batch`; what it asks for comes back from wait(). `masks` (may be null) are applied
    // to the logits before the argmax and the download.
    void launch(model::Batch batch, bool want_logits, bool want_argmax, std::shared_ptr<StepMasks> masks = nullptr);
    // Blocks until the step in flight is done. Rethrows a failure of the step.
    StepOutput wait();

private:
    void loop();
    StepOutput run(model::Batch& batch, bool want_logits, bool want_argmax, std::shared_ptr<StepMasks> masks);
    // Waits for the masks until their deadline, applies those that are done, and lists the rest.
    std::vector<int32_t> apply_masks(Tensor& logits, StepMasks& masks);

    model::CausalLm& model_;
    model::SequenceCache& cache_;
    TraceRecorder* trace_;
    std::mutex mutex_;
    std::condition_variable cv_;
    model::Batch batch_;
    bool want_logits_ = true, want_argmax_ = false;
    std::shared_ptr<StepMasks> masks_;
    StepOutput output_;
    std::exception_ptr error_;
    bool has_job_ = false, done_ = false, stop_ = false;
    std::thread thread_;
};

}  // namespace deepinfer::runtime
