#pragma once
// Runs model forward steps on a thread of its own, so the engine thread can plan the next step
// (and sample / stream the previous one) while a step runs. One step in flight at a time.
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "model/causal_lm.h"

namespace deepinfer::runtime {

class StepExecutor {
public:
    StepExecutor(model::CausalLm& model, model::SequenceCache& cache);
    ~StepExecutor();

    // Starts `batch`; its logits rows come back from wait().
    void launch(model::Batch batch);
    // Blocks until the step in flight is done; host fp32 logits [rows * vocab]. Rethrows a
    // failure of the step.
    std::vector<float> wait();

private:
    void loop();

    model::CausalLm& model_;
    model::SequenceCache& cache_;
    std::mutex mutex_;
    std::condition_variable cv_;
    model::Batch batch_;
    std::vector<float> logits_;
    std::exception_ptr error_;
    bool has_job_ = false, done_ = false, stop_ = false;
    std::thread thread_;
};

}  // namespace deepinfer::runtime
