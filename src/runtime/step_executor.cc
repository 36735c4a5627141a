#include "runtime/step_executor.h"

#include <algorithm>
#include <utility>

namespace deepinfer::runtime {

StepExecutor::StepExecutor(model::CausalLm& model, model::SequenceCache& cache, TraceRecorder* trace, int penalty_slots)
    : model_(model), cache_(cache), trace_(trace), penalty_slots_(penalty_slots), thread_([this] { loop(); }) {}

StepExecutor::~StepExecutor() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void StepExecutor::launch(model::Batch batch, SampleJob job) {
    std::lock_guard<std::mutex> lock(mutex_);
    batch_ = std::move(batch);
    job_ = std::move(job);
    has_job_ = true;
    done_ = false;
    cv_.notify_all();
}

StepOutput StepExecutor::wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
    done_ = false;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return std::move(output_);
}

void StepExecutor::loop() {
    trace_->name_thread("step executor");
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        cv_.wait(lock, [&] { return has_job_ || stop_; });
        if (stop_) return;
        has_job_ = false;
        model::Batch batch = std::move(batch_);
        SampleJob job = std::move(job_);
        lock.unlock();
        StepOutput out;
        std::exception_ptr error;
        try {
            Tensor logits;
            {
                TraceRecorder::Scope span(trace_, "forward",
                                          trace_->enabled() ? nlohmann::json{{"tokens", batch.token_ids.size()}, {"rows", batch.logit_rows.size()}} : nullptr);
                logits = model_.forward(batch, cache_);
            }
            if (!job.rows.empty()) out = sample(logits, job);
        } catch (...) {
            error = std::current_exception();
        }
        lock.lock();
        output_ = std::move(out);
        error_ = error;
        done_ = true;
        cv_.notify_all();
    }
}

// Samples every logit row on the backend; only the tokens (and asked-for logprobs) come back.
StepOutput StepExecutor::sample(const Tensor& logits, const SampleJob& job) {
    TraceRecorder::Scope span(trace_, "sample", trace_->enabled() ? nlohmann::json{{"rows", job.rows.size()}} : nullptr);
    kernels::Backend& backend = model_.backend();
    int64_t rows = static_cast<int64_t>(job.rows.size());
    for (const PenaltyReset& r : job.resets) {
        if (!penalty_state_.defined()) penalty_state_ = backend.zeros(DType::kI32, {penalty_slots_, logits.dim(-1)});
        backend.reset_penalties(penalty_state_, r.slot, r.prompt, r.output);
    }
    StepOutput out;
    bool logprobs = false;
    for (const kernels::SampleRow& row : job.rows) {
        logprobs = logprobs || row.logprobs >= 0;
        out.top_width = std::max(out.top_width, row.logprobs);
    }
    kernels::SampleArgs args{logits, job.rows, job.bias, penalty_state_, backend.empty(DType::kI32, {rows})};
    if (logprobs) args.logprobs = backend.empty(DType::kF32, {rows});
    if (out.top_width > 0) {
        args.top_tokens = backend.empty(DType::kI32, {rows, out.top_width});
        args.top_logprobs = backend.empty(DType::kF32, {rows, out.top_width});
    }
    backend.sample_rows(args);
    out.tokens.resize(static_cast<size_t>(rows));
    backend.download(args.tokens, out.tokens.data());
    if (logprobs) {
        out.logprobs.resize(static_cast<size_t>(rows));
        backend.download(args.logprobs, out.logprobs.data());
    }
    if (out.top_width > 0) {
        out.top_tokens.resize(static_cast<size_t>(args.top_tokens.numel()));
        out.top_logprobs.resize(out.top_tokens.size());
        backend.download(args.top_tokens, out.top_tokens.data());
        backend.download(args.top_logprobs, out.top_logprobs.data());
    }
    return out;
}

}  // namespace deepinfer::runtime
