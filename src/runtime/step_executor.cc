#include "runtime/step_executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

namespace deepinfer::runtime {

StepExecutor::StepExecutor(model::CausalLm& model, model::SequenceCache& cache, TraceRecorder* trace, int penalty_slots)
    : model_(model), cache_(cache), trace_(trace), penalty_slots_(penalty_slots), thread_([this] { loop(); }) {}

StepExecutor::~StepExecutor() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
        cv_.notify_all();
    }
    thread_.join();
}

void StepExecutor::launch(model::Batch batch, SampleJob job, std::shared_ptr<StepMasks> masks) {
    std::lock_guard<std::mutex> lock(mutex_);
    batch_ = std::move(batch);
    job_ = std::move(job);
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

StepOutput StepExecutor::run(model::Batch& batch, SampleJob& job, std::shared_ptr<StepMasks> masks) {
    auto start = std::chrono::steady_clock::now();
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
        // A late row's token is drawn on the host once its mask is done: its device draw is
        // thrown away and must not be counted in its penalty row.
        for (int32_t i : late) job.rows.at(static_cast<size_t>(masks->logit_row(i))).penalty_slot = -1;
    }
    StepOutput out;
    if (!job.rows.empty()) sample(logits, job, out);
    if (masks) download_late_rows(logits, *masks, late, out);
    out.raw_logits = download_rows(logits, job.raw_rows);  // a draft distribution's verification reads whole rows
    out.masks = std::move(masks);
    if (model_.draft_model() != nullptr) out.features = model_.step_features();
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
}

// The unmasked logits of each late grammar row.
void StepExecutor::download_late_rows(const Tensor& logits, const StepMasks& masks, const std::vector<int32_t>& late,
                                      StepOutput& out) {
    std::vector<int32_t> rows;
    for (int32_t i : late) rows.push_back(masks.logit_row(i));
    std::vector<std::vector<float>> got = download_rows(logits, rows);
    out.late_logits.resize(masks.size());
    for (size_t k = 0; k < late.size(); ++k) out.late_logits[late[k]] = std::move(got[k]);
}

// Rows `rows` of `logits` [R, vocab] on the host: one gather and one download for all of them.
std::vector<std::vector<float>> StepExecutor::download_rows(const Tensor& logits, std::span<const int32_t> rows) {
    std::vector<std::vector<float>> out;
    if (rows.empty()) return out;
    kernels::Backend& backend = model_.backend();
    int64_t n = static_cast<int64_t>(rows.size()), vocab = logits.dim(-1);
    Tensor index = Tensor::empty(DType::kI32, {n});
    std::copy(rows.begin(), rows.end(), index.data<int32_t>());
    Tensor gathered = backend.empty(DType::kF32, {n, vocab});
    backend.gather_rows(logits, backend.upload(index), gathered);
    std::vector<float> host(static_cast<size_t>(n * vocab));
    backend.download(gathered, host.data());
    for (int64_t r = 0; r < n; ++r) out.emplace_back(host.begin() + r * vocab, host.begin() + (r + 1) * vocab);
    return out;
}

// Samples every logit row on the backend; only the tokens (and asked-for logprobs) come back.
void StepExecutor::sample(const Tensor& logits, const SampleJob& job, StepOutput& out) {
    TraceRecorder::Scope span(trace_, "sample", trace_->enabled() ? nlohmann::json{{"rows", job.rows.size()}} : nullptr);
    kernels::Backend& backend = model_.backend();
    int64_t rows = static_cast<int64_t>(job.rows.size());
    for (const PenaltyReset& r : job.resets) {
        if (!penalty_state_.defined()) penalty_state_ = backend.zeros(DType::kI32, {penalty_slots_, logits.dim(-1)});
        backend.reset_penalties(penalty_state_, r.slot, r.prompt, r.output);
    }
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
        std::shared_ptr<StepMasks> masks = std::move(masks_);
        lock.unlock();
        StepOutput out;
        std::exception_ptr error;
        try {
            out = run(batch, job, std::move(masks));
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
