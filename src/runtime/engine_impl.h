#pragma once
// The engine behind deepinfer::Engine: requests come in through a locked inbox, the engine thread
// owns every sequence, plans steps with the Scheduler, runs them on the StepExecutor (planning the
// next step while one runs when async scheduling is on), samples, and pushes events to streams.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "deepinfer/engine.h"
#include "base/trace.h"
#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "runtime/cache/prefix_cache.h"
#include "runtime/penalty_slots.h"
#include "runtime/grammar_masks.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"
#include "runtime/sequence.h"
#include "runtime/speculative/drafter.h"
#include "runtime/speculative/verify_planner.h"
#include "runtime/step_executor.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::runtime {

class EngineImpl;

class RequestStreamImpl final : public RequestStream {
public:
    RequestStreamImpl(RequestId id, EngineImpl* engine) : id_(id), engine_(engine) {}
    RequestId id() const override { return id_; }
    std::optional<RequestEvent> next() override;
    std::optional<RequestEvent> next_for(std::chrono::milliseconds timeout) override;
    void cancel() override;
    void set_listener(std::function<void()> listener) override;

    void push(RequestEvent ev);  // engine thread
    void detach();               // the engine is gone: cancel() becomes a no-op

private:
    std::optional<RequestEvent> pop_locked();

    RequestId id_;
    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<RequestEvent> events_;
    bool closed_ = false;
    EngineImpl* engine_;
    std::function<void()> listener_;
};

struct RequestState {
    RequestId id = 0;
    GenerationRequest request;
    std::shared_ptr<RequestStreamImpl> stream;
    std::vector<std::unique_ptr<Sequence>> sequences;
    std::chrono::steady_clock::time_point arrival;
    double ttft_s = -1;
    double queue_s = -1;      // arrival to its first step
    uint64_t export_id = 0;   // its spans go to request.span_sink (prefix cache export; 0 = none)
    bool cancelled = false;
    int completion_tokens = 0;
    std::shared_ptr<const grammar::CompiledGrammar> grammar;  // structured output (null when none)
};

class EngineImpl final : public Engine {
public:
    explicit EngineImpl(const EngineConfig& config);
    ~EngineImpl() override;

    std::shared_ptr<RequestStream> submit(GenerationRequest request) override;
    EngineStats stats() const override;
    std::string check_grammar(const GrammarSpec& grammar) override;
    const std::string& model_name() const override { return name_; }
    int32_t vocab_size() const override { return static_cast<int32_t>(model_->vocab_size()); }
    int64_t max_model_len() const override { return max_model_len_; }
    bool deterministic_available() const override { return backend_->execution().batch_invariant(); }
    std::vector<int32_t> tokenize(const std::string& text, bool add_special_tokens) const override;
    std::string detokenize(const std::vector<int32_t>& tokens, bool skip_special_tokens) const override;
    void shutdown(bool cancel_running) override;
    int import_prefix_spans(std::vector<std::vector<std::byte>> blobs) override;
    void trace_span(const std::string& name, std::chrono::steady_clock::time_point begin, std::chrono::steady_clock::time_point end,
                    const std::vector<std::pair<std::string, double>>& args) override;

    void cancel(RequestId id);

private:
    std::string check_request(GenerationRequest& r) const;
    void loop();
    void take_inbox(bool block);
    void start_request(std::unique_ptr<RequestState> rs);
    StepPlan plan_step(bool ahead);
    void launch(const StepPlan& plan);
    StepOutput wait_step();
    // `ahead`: rows after the sequence's last token (a draft's position in a verified chunk).
    // with_penalties false: the row reads and records no penalty state (its sample is redone on
    // the host: resample_after_drafts).
    void add_sample_row(Sequence& s, SampleJob& job, int64_t ahead = 0, bool with_penalties = true);
    // Per sampling chunk, its rows' samples; none for a chunk whose sequence no longer wants them
    // (finished, cancelled, or waiting for a late grammar mask).
    std::vector<std::vector<SampleOutput>> sampled_rows(const StepPlan& plan, const StepOutput& step);
    void append_token(Sequence& s, SampleOutput out, int64_t& detokenize_us);
    // Structured output (engine_grammar.cc).
    std::shared_ptr<StepMasks> submit_masks(const StepPlan& plan);
    void defer_sample(Sequence& s, const StepOutput& step, size_t mask_row);
    void resolve_late_samples();
    // The matcher takes the token; false (the sequence fails) if the grammar refuses it.
    bool advance_grammar(Sequence& s, int32_t token, RequestEvent& ev, SequenceEvent& se);
    void commit(const StepPlan& plan, const StepOutput& step);
    // Speculative decoding (engine_speculative.cc): a verified chunk's samples keep the drafts
    // they confirm, then the first sample that differs (or follows the last draft).
    void commit_verified(const ScheduledChunk& c, std::vector<SampleOutput>& samples,
                         std::span<const std::vector<float>> raw_logits, int64_t& detokenize_us);
    bool drafts_have_distribution(const ScheduledChunk& c) const;
    // A verified chunk of a sequence with penalties or a grammar: only its first row samples on
    // the device (its history and mask are the sequence's); the rows after drafts come back raw
    // and are sampled here.
    bool host_samples_after_drafts(const ScheduledChunk& c) const;
    size_t resample_after_drafts(const ScheduledChunk& c, std::vector<SampleOutput>& samples,
                                 std::span<const std::vector<float>> raw_logits) const;
    size_t raw_rows_of(const ScheduledChunk& c) const;
    size_t verify_with_distribution(const ScheduledChunk& c, std::vector<SampleOutput>& samples,
                                    std::span<const std::vector<float>> raw_logits) const;
    void record_verification(size_t drafts, size_t kept);
    bool speculates(const GenerationRequest& r) const;
    // Returns the seconds drafting took.
    double draft_with_model(const StepPlan& plan, const model::StepFeatures& features);
    int draft_length(const StepPlan& plan, size_t sequences);
    void finish_done_requests();
    void publish_stats();
    void fail_everything(const std::string& message);
    void write_trace();
    void start_prefix_cache();
    void record_prefixes(const StepPlan& plan, bool ok);
    bool idle_prefix_work();

    EngineConfig config_;
    TraceRecorder trace_;  // enabled by config_.trace_path; written at shutdown
    bool trace_written_ = false;
    std::string name_;
    std::unique_ptr<kernels::Backend> backend_;
    std::unique_ptr<model::CausalLm> model_;
    std::shared_ptr<tokenizer::Tokenizer> tokenizer_;
    std::unique_ptr<model::SequenceCache> cache_;
    std::unique_ptr<PrefixCache> prefix_cache_;
    std::unique_ptr<Scheduler> scheduler_;
    std::unique_ptr<StepExecutor> executor_;
    std::unique_ptr<GrammarService> grammar_;
    std::shared_ptr<const Drafter> drafter_;  // speculative decoding (null when off)
    model::DraftModel* draft_model_ = nullptr;  // the model's draft (--speculative dspark / mtp), run after each step
    StepCostModel step_cost_;                 // step time per token count (engine thread)
    AcceptanceModel acceptance_;              // drafts kept per position (engine thread)
    DraftCostModel draft_cost_;               // drafting time per draft length (engine thread)
    static constexpr int64_t kExploreEvery = 16;  // draft lengths: one choice in this many tries another
    int64_t draft_choices_ = 0;
    // The draft model rests (is not run, its contexts lapse) after this many choices of length 0
    // in a row, until a length pays again; drafts made with less context than kWarmContext
    // positions (just after a rest) do not count towards the acceptance per position.
    static constexpr int64_t kRestAfter = 32;
    static constexpr int64_t kRestExploreFactor = 4;  // while resting, explore this many times less often
    static constexpr int64_t kWarmContext = 16;
    static constexpr int kRest = -1;  // draft_length: do not run the draft model
    int64_t zero_lengths_ = 0;  // choices of length 0 in a row
    bool draft_resting_ = false;
    int64_t max_model_len_ = 0;

    // Inbox (any thread) -> engine thread.
    mutable std::mutex inbox_mutex_;
    std::condition_variable inbox_cv_;
    std::vector<std::unique_ptr<RequestState>> inbox_;
    std::vector<RequestId> cancels_;
    std::vector<std::vector<std::byte>> imports_;  // checked spans for the prefix cache
    bool stopping_ = false, cancel_on_stop_ = false;
    std::atomic<RequestId> next_id_{1};

    // Engine thread only.
    std::map<RequestId, std::unique_ptr<RequestState>> requests_;
    std::map<RequestId, RequestEvent> pending_events_;
    uint64_t arrivals_ = 0;
    uint64_t launches_ = 0;
    std::unique_ptr<PenaltySlots> penalty_slots_;
    std::vector<Sequence*> late_samples_;  // sequences whose sample waits for a late mask

    mutable std::mutex stats_mutex_;
    EngineStats stats_;
    std::thread thread_;
};

}  // namespace deepinfer::runtime
