#include "runtime/step_executor.h"

#include <utility>

namespace deepinfer::runtime {

StepExecutor::StepExecutor(model::CausalLm& model, model::SequenceCache& cache)
    : model_(model), cache_(cache), thread_([this] { loop(); }) {}

StepExecutor::~StepExecutor() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void StepExecutor::launch(model::Batch batch) {
    std::lock_guard<std::mutex> lock(mutex_);
    batch_ = std::move(batch);
    has_job_ = true;
    done_ = false;
    cv_.notify_all();
}

std::vector<float> StepExecutor::wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
    done_ = false;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return std::move(logits_);
}

void StepExecutor::loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        cv_.wait(lock, [&] { return has_job_ || stop_; });
        if (stop_) return;
        has_job_ = false;
        model::Batch batch = std::move(batch_);
        lock.unlock();
        std::vector<float> host;
        std::exception_ptr error;
        try {
            Tensor logits = model_.forward(batch, cache_);
            host.resize(static_cast<size_t>(logits.numel()));
            model_.backend().download(logits, host.data());
        } catch (...) {
            error = std::current_exception();
        }
        lock.lock();
        logits_ = std::move(host);
        error_ = error;
        done_ = true;
        cv_.notify_all();
    }
}

}  // namespace deepinfer::runtime
