#include "runtime/step_executor.h"

#include <utility>

namespace deepinfer::runtime {

StepExecutor::StepExecutor(model::CausalLm& model, model::SequenceCache& cache, TraceRecorder* trace)
    : model_(model), cache_(cache), trace_(trace), thread_([this] { loop(); }) {}

StepExecutor::~StepExecutor() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void StepExecutor::launch(model::Batch batch, bool want_logits, bool want_argmax) {
    std::lock_guard<std::mutex> lock(mutex_);
    batch_ = std::move(batch);
    want_logits_ = want_logits;
    want_argmax_ = want_argmax;
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
        bool want_logits = want_logits_, want_argmax = want_argmax_;
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
            TraceRecorder::Scope span(trace_, "download");
            kernels::Backend& backend = model_.backend();
            if (want_argmax && logits.numel() > 0) {
                Tensor ids = backend.empty(DType::kI32, {logits.numel() / logits.dim(-1)});
                backend.argmax_rows(logits, ids);
                out.argmax.resize(static_cast<size_t>(ids.numel()));
                backend.download(ids, out.argmax.data());
            }
            if (want_logits) {
                out.logits.resize(static_cast<size_t>(logits.numel()));
                backend.download(logits, out.logits.data());
            }
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

}  // namespace deepinfer::runtime
