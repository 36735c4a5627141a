#include "runtime/step_executor.h"

#include <cstring>
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

void StepExecutor::launch(model::Batch batch, bool want_logits, bool want_argmax, std::shared_ptr<StepMasks> masks) {
    std::lock_guard<std::mutex> lock(mutex_);
    batch_ = std::move(batch);
    want_logits_ = want_logits;
    want_argmax_ = want_argmax;
    masks_ = std::move(masks);
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

// The deadline counts from the moment the logits exist: a device's queue is drained first when
// some mask is still being computed.
std::vector<int32_t> StepExecutor::apply_masks(Tensor& logits, StepMasks& masks) {
    kernels::Backend& backend = model_.backend();
    if (!masks.all_done()) backend.synchronize();
    const std::vector<uint8_t>& applied = masks.close();
    std::vector<int32_t> rows, late;
    for (size_t i = 0; i < masks.size(); ++i) (applied[i] ? rows : late).push_back(static_cast<int32_t>(i));
    if (rows.empty()) return late;
    int64_t words = masks.words();
    Tensor host_rows = Tensor::empty(DType::kI32, {static_cast<int64_t>(rows.size())});
    Tensor host_bits = Tensor::empty(DType::kI32, {static_cast<int64_t>(rows.size()), words});
    for (size_t k = 0; k < rows.size(); ++k) {
        host_rows.data<int32_t>()[k] = masks.logit_row(rows[k]);
        std::memcpy(host_bits.data<int32_t>() + k * words, masks.row_words(rows[k]), words * sizeof(uint32_t));
    }
    backend.apply_token_mask(logits, backend.upload(host_rows), backend.upload(host_bits));
    return late;
}

StepOutput StepExecutor::run(model::Batch& batch, bool want_logits, bool want_argmax, std::shared_ptr<StepMasks> masks) {
    StepOutput out;
    Tensor logits;
    {
        TraceRecorder::Scope span(trace_, "forward",
                                  trace_->enabled() ? nlohmann::json{{"tokens", batch.token_ids.size()}, {"rows", batch.logit_rows.size()}} : nullptr);
        logits = model_.forward(batch, cache_);
    }
    std::vector<int32_t> late;
    if (masks) {
        TraceRecorder::Scope span(trace_, "masks");
        late = apply_masks(logits, *masks);
    }
    TraceRecorder::Scope span(trace_, "download");
    kernels::Backend& backend = model_.backend();
    int64_t vocab = logits.dim(-1);
    if (want_argmax && logits.numel() > 0) {
        Tensor ids = backend.empty(DType::kI32, {logits.numel() / vocab});
        backend.argmax_rows(logits, ids);
        out.argmax.resize(static_cast<size_t>(ids.numel()));
        backend.download(ids, out.argmax.data());
    }
    if (want_logits) {
        out.logits.resize(static_cast<size_t>(logits.numel()));
        backend.download(logits, out.logits.data());
    }
    if (masks) out.late_logits.resize(masks->size());
    for (int32_t i : late) {
        std::vector<float>& row = out.late_logits[i];
        row.resize(static_cast<size_t>(vocab));
        Tensor one = Tensor::empty(DType::kI32, {1});
        one.data<int32_t>()[0] = masks->logit_row(i);
        Tensor gathered = backend.empty(DType::kF32, {1, vocab});
        backend.gather_rows(logits, backend.upload(one), gathered);
        backend.download(gathered, row.data());
    }
    out.masks = std::move(masks);
    return out;
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
        std::shared_ptr<StepMasks> masks = std::move(masks_);
        lock.unlock();
        StepOutput out;
        std::exception_ptr error;
        try {
            out = run(batch, want_logits, want_argmax, std::move(masks));
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
