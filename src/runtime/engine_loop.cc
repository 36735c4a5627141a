// The engine thread: take new requests and cancellations, plan a step, run it, sample, stream.
#include <algorithm>

#include "base/error.h"
#include "base/logging.h"
#include "runtime/engine_impl.h"
#include "runtime/sampler.h"

namespace deepinfer::runtime {
namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

}  // namespace

void EngineImpl::start_request(std::unique_ptr<RequestState> rs) {
    const GenerationRequest& r = rs->request;
    std::vector<int> eos = model_->eos_token_ids();
    if (auto e = tokenizer_->eos_id()) eos.push_back(*e);
    for (int i = 0; i < r.sampling.n; ++i) {
        auto s = std::make_unique<Sequence>();
        s->request = rs.get();
        s->index = i;
        s->seed = *r.sampling.seed + static_cast<uint64_t>(i);
        s->deterministic = r.deterministic;
        s->speculative = speculates(r);
        s->max_length = static_cast<int64_t>(r.prompt_tokens.size()) + r.sampling.max_tokens;
        s->priority = r.priority;
        s->arrival = arrivals_++;
        s->tokens = r.prompt_tokens;
        s->prompt_len = static_cast<int>(r.prompt_tokens.size());
        s->text = std::make_unique<OutputText>(tokenizer_, rs->request.sampling, std::vector<int32_t>(eos.begin(), eos.end()));
        if (rs->grammar) {
            s->grammar = std::make_unique<SequenceGrammar>();
            s->grammar->matcher = std::make_shared<grammar::GrammarMatcher>(rs->grammar, config_.structured.max_rollback_tokens);
        }
        scheduler_->add(s.get());
        rs->sequences.push_back(std::move(s));
    }
    if (r.span_sink) {
        if (prefix_cache_) rs->export_id = prefix_cache_->start_export(r.prompt_tokens, r.span_sink);
        else r.span_sink->on_done(0);
    }
    RequestId id = rs->id;
    requests_[id] = std::move(rs);
}

// Moves new requests and cancellations into the engine's own state; with `block`, waits for work.
void EngineImpl::take_inbox(bool block) {
    std::vector<std::unique_ptr<RequestState>> incoming;
    std::vector<RequestId> cancels;
    std::vector<std::vector<std::byte>> imports;
    {
        std::unique_lock<std::mutex> lock(inbox_mutex_);
        if (block) inbox_cv_.wait(lock, [&] { return !inbox_.empty() || !cancels_.empty() || !imports_.empty() || stopping_; });
        incoming.swap(inbox_);
        cancels.swap(cancels_);
        imports.swap(imports_);
        if (stopping_ && cancel_on_stop_)
            for (const auto& [id, rs] : requests_) cancels.push_back(id);
    }
    // Imported spans first: requests submitted after them look them up when queued.
    for (auto& blob : imports) prefix_cache_->import_span(blob);
    for (auto& rs : incoming) start_request(std::move(rs));
    for (RequestId id : cancels) {
        auto it = requests_.find(id);
        if (it != requests_.end()) it->second->cancelled = true;
    }
}

void EngineImpl::launch(const StepPlan& plan) {
    TraceRecorder::Scope span(&trace_, "launch", trace_.enabled() ? nlohmann::json{{"tokens", plan.num_tokens()}, {"chunks", plan.chunks.size()}} : nullptr);
    model::Batch batch;
    SampleJob job;
    ++launches_;
    for (const ScheduledChunk& c : plan.chunks) {
        Sequence* s = c.seq;
        int32_t begin = static_cast<int32_t>(batch.token_ids.size());
        int32_t own = static_cast<int32_t>(c.count - c.draft.size());  // of the sequence's tokens
        batch.append(s->tokens, c.start, own, s->cache_state, s->window_from);
        batch.token_ids.insert(batch.token_ids.end(), c.draft.begin(), c.draft.end());
        batch.seqs.back().num_tokens += static_cast<int32_t>(c.draft.size());
        batch.compressed_until.push_back(s->compressed_until);
        batch.prompt_lengths.push_back(s->prompt_len);
        bool raw = drafts_have_distribution(c);  // the rule reads the rows of the drafts' positions
        bool on_host = host_samples_after_drafts(c);  // the rows after drafts are sampled on the host
        for (int64_t r = c.sample_rows(); r > 0; --r) {  // a verified chunk samples after every position
            int64_t ahead = c.sample_rows() - r;
            if ((raw && r > 1) || (on_host && ahead > 0))
                job.raw_rows.push_back(static_cast<int32_t>(batch.logit_rows.size()));
            batch.logit_rows.push_back(begin + static_cast<int32_t>(c.count - r));
            add_sample_row(*s, job, ahead, !on_host || ahead == 0);
        }
        s->inflight = c.count;
        s->awaiting_sample = c.samples;
        if (s->request->queue_s < 0) s->request->queue_s = seconds_between(s->request->arrival, std::chrono::steady_clock::now());
    }
    cache_->describe(batch);  // the step must not read tables the planner is appending to
    if (prefix_cache_) batch.transfers = prefix_cache_->take_transfers();
    executor_->launch(std::move(batch), std::move(job), submit_masks(plan));
}

// The sampling row of a sequence whose chunk ends at its last token: the next token's position
// is the draw's counter; a sequence with penalties gets its row of penalty state (its history is
// written when the row is new to it).
void EngineImpl::add_sample_row(Sequence& s, SampleJob& job, int64_t ahead, bool with_penalties) {
    const SamplingParams& p = s.request->request.sampling;
    kernels::SampleRow row = sample_row_of(p, s.seed, static_cast<int64_t>(s.tokens.size()) + ahead);
    row.bias_begin = static_cast<int32_t>(job.bias.size());
    for (const auto& [token, bias] : p.logit_bias) job.bias.push_back({token, bias});
    row.bias_count = static_cast<int32_t>(job.bias.size()) - row.bias_begin;
    if (needs_penalty_state(p) && with_penalties) {
        bool fresh = false;
        row.penalty_slot = penalty_slots_->acquire(&s, launches_, fresh);
        if (fresh)
            job.resets.push_back({row.penalty_slot, std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + s.prompt_len),
                                  std::vector<int32_t>(s.tokens.begin() + s.prompt_len, s.tokens.end())});
    }
    job.rows.push_back(row);
}

// Each sampling row's token (with logprobs when asked), by chunk; nothing for rows no longer wanted.
std::vector<std::vector<SampleOutput>> EngineImpl::sampled_rows(const StepPlan& plan, const StepOutput& step) {
    std::vector<std::vector<SampleOutput>> outs;
    size_t mask_row = 0, r = 0;  // grammar rows are the sampling rows with a matcher, in order
    for (const ScheduledChunk& c : plan.chunks) {
        if (!c.samples) continue;
        size_t first = r;
        r += static_cast<size_t>(c.sample_rows());
        std::vector<SampleOutput>& mine = outs.emplace_back();
        Sequence* s = c.seq;
        const RequestState* rs = s->request;
        bool masked = s->grammar != nullptr;
        if (masked) ++mask_row;
        if (s->finished() || rs->cancelled) continue;
        if (masked && !step.masks->applied(mask_row - 1)) {
            defer_sample(*s, step, mask_row - 1);
            continue;
        }
        const SamplingParams& p = rs->request.sampling;
        for (size_t row = first; row < r; ++row) {
            SampleOutput& out = mine.emplace_back();
            out.token = step.tokens.at(row);
            if (p.logprobs >= 0) out.logprob = step.logprobs.at(row);
            for (int i = 0; i < p.logprobs; ++i) {
                size_t at = row * static_cast<size_t>(step.top_width) + static_cast<size_t>(i);
                out.top.push_back({step.top_tokens.at(at), step.top_logprobs.at(at)});
            }
        }
    }
    return outs;
}

// A sampled token joins its sequence: text (detokenized incrementally), event, finish.
void EngineImpl::append_token(Sequence& s, SampleOutput out, int64_t& detokenize_us) {
    RequestState* rs = s.request;
    const SamplingParams& p = rs->request.sampling;
    s.tokens.push_back(out.token);
    ++rs->completion_tokens;
    if (rs->ttft_s < 0) rs->ttft_s = seconds_between(rs->arrival, std::chrono::steady_clock::now());
    RequestEvent& ev = pending_events_[rs->id];
    ev.id = rs->id;
    auto it = std::find_if(ev.sequences.begin(), ev.sequences.end(), [&](const SequenceEvent& e) { return e.index == s.index; });
    SequenceEvent& se = it != ev.sequences.end() ? *it : ev.sequences.emplace_back(SequenceEvent{s.index});
    se.tokens.push_back(out.token);
    if (s.grammar && !advance_grammar(s, out.token, ev, se)) return;
    int64_t t0 = trace_.enabled() ? trace_.now_us() : 0;
    se.text += s.text->add(out.token, s.num_generated());
    FinishReason finish = s.text->finish();
    if (finish == FinishReason::kNone && s.grammar && s.grammar->matcher->is_terminated()) {
        finish = FinishReason::kStop;  // the grammar took EOS (which ignore_eos would have let pass)
        se.text += s.text->flush();
    }
    if (trace_.enabled()) detokenize_us += trace_.now_us() - t0;
    if (p.logprobs >= 0) se.logprobs.push_back({out.token, out.logprob});
    if (p.logprobs > 0) se.top_logprobs.push_back(std::move(out.top));
    if (finish != FinishReason::kNone) s.finish = se.finish = finish;
}

void EngineImpl::commit(const StepPlan& plan, const StepOutput& step) {
    std::vector<std::vector<SampleOutput>> sampled = sampled_rows(plan, step);
    int64_t begin = trace_.enabled() ? trace_.now_us() : 0, detokenize_us = 0;
    size_t row = 0, raw = 0;
    for (const ScheduledChunk& c : plan.chunks) {
        Sequence* s = c.seq;
        s->inflight = 0;
        s->awaiting_sample = false;
        if (!c.draft.empty()) {
            size_t rows = raw_rows_of(c);
            commit_verified(c, sampled[row++], std::span(step.raw_logits).subspan(raw, rows), detokenize_us);
            raw += rows;
            continue;
        }
        s->num_computed += c.count;
        if (!c.samples) continue;
        std::vector<SampleOutput>& outs = sampled[row++];
        if (!outs.empty()) append_token(*s, std::move(outs.front()), detokenize_us);
    }
    if (trace_.enabled()) trace_.span("commit", begin, trace_.now_us(), {{"rows", row}, {"detokenize_us", detokenize_us}});
}

// Cancelled and fully finished requests: free their sequences and send their last events. The
// stats are published before the events, so a caller who saw its last event sees them settled.
void EngineImpl::finish_done_requests() {
    TraceRecorder::Scope span(&trace_, "finish");
    std::erase_if(late_samples_, [](Sequence* s) { return s->request->cancelled; });  // freed below
    std::vector<std::pair<std::shared_ptr<RequestStreamImpl>, RequestEvent>> outgoing;
    for (auto it = requests_.begin(); it != requests_.end();) {
        RequestState* rs = it->second.get();
        RequestEvent ev = std::move(pending_events_[rs->id]);
        pending_events_.erase(rs->id);
        ev.id = rs->id;
        for (auto& s : rs->sequences) {
            if (rs->cancelled && !s->finished()) {
                s->finish = FinishReason::kCancelled;
                ev.sequences.emplace_back(SequenceEvent{s->index}).finish = FinishReason::kCancelled;
            }
            if (s->finished() && s->inflight == 0) scheduler_->remove(s.get());  // idempotent
        }
        bool done = std::all_of(rs->sequences.begin(), rs->sequences.end(), [](const auto& s) { return s->finished(); });
        ev.prompt_tokens = static_cast<int>(rs->request.prompt_tokens.size());
        for (auto& s : rs->sequences) ev.cached_tokens = std::max(ev.cached_tokens, static_cast<int>(s->cached_tokens));
        ev.completion_tokens = rs->completion_tokens;
        ev.time_to_first_token_s = rs->ttft_s;
        ev.queue_time_s = rs->queue_s;
        ev.finished = done;
        if (done && rs->export_id) prefix_cache_->end_export_producer(rs->export_id);
        if (done) {
            std::lock_guard<std::mutex> lock(stats_mutex_);
            ++stats_.requests_finished;
            stats_.generated_tokens += rs->completion_tokens;
            stats_.prompt_tokens += ev.prompt_tokens;
        }
        if (!ev.sequences.empty() || done) outgoing.emplace_back(rs->stream, std::move(ev));
        if (done) {
            for (auto& s : rs->sequences) penalty_slots_->release(s.get());
            rs->stream->detach();
            it = requests_.erase(it);
        } else {
            ++it;
        }
    }
    publish_stats();
    for (auto& [stream, ev] : outgoing) stream->push(std::move(ev));
}

void EngineImpl::publish_stats() {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.requests_running = scheduler_->num_running();
    stats_.requests_waiting = scheduler_->num_waiting();
    stats_.preemptions = scheduler_->num_preemptions();
    if (prefix_cache_) {
        stats_.prefix_cache = prefix_cache_->stats();
        stats_.prefix_tokens_reused = stats_.prefix_cache.hit_tokens;
    }
    stats_.cache_usage = cache_->usage();
    stats_.cache_bytes = cache_->bytes();
    if (stats_.cache_bytes_by_kind.empty()) stats_.cache_bytes_by_kind = cache_->bytes_by_kind();
}

// After a step: its cache copies landed, and the spans its sequences completed join the prefix
// index (before the next step moves their carries on).
void EngineImpl::record_prefixes(const StepPlan& plan, bool ok) {
    if (!prefix_cache_) return;
    prefix_cache_->on_step_done(ok);
    if (!ok) return;
    for (const ScheduledChunk& c : plan.chunks) prefix_cache_->on_computed(*c.seq);
    prefix_cache_->pump_exports();
}

// With no step planned: runs the prefix cache's queued copies here (exports wait for them) and
// moves exports on. Returns whether exports still wait for something.
bool EngineImpl::idle_prefix_work() {
    if (!prefix_cache_) return false;
    bool moved = prefix_cache_->exporting() || prefix_cache_->has_pending_transfers();
    if (prefix_cache_->has_pending_transfers()) prefix_cache_->run_pending_transfers();
    prefix_cache_->pump_exports();
    if (moved) publish_stats();  // no step publishes what the exports did here
    return prefix_cache_->exporting();
}

void EngineImpl::fail_everything(const std::string& message) {
    spdlog::error("engine step failed: {}", message);
    for (auto& [id, rs] : requests_) {
        for (auto& s : rs->sequences) scheduler_->remove(s.get());
        if (rs->export_id) prefix_cache_->end_export_producer(rs->export_id);
        RequestEvent ev{id};
        ev.finished = true;
        ev.error = "engine step failed: " + message;
        rs->stream->push(std::move(ev));
        rs->stream->detach();
    }
    requests_.clear();
    pending_events_.clear();
    penalty_slots_->release_all();
    late_samples_.clear();
}

StepPlan EngineImpl::plan_step(bool ahead) {
    TraceRecorder::Scope span(&trace_, ahead ? "schedule ahead" : "schedule");
    return scheduler_->schedule(ahead);
}

StepOutput EngineImpl::wait_step() {
    TraceRecorder::Scope span(&trace_, "wait");
    return executor_->wait();
}

void EngineImpl::loop() {
    trace_.name_thread("engine");
    std::optional<StepPlan> inflight;
    for (;;) {
        take_inbox(false);
        if (prefix_cache_) prefix_cache_->poll();
        if (!late_samples_.empty()) resolve_late_samples();
        if (!inflight) {
            finish_done_requests();
            StepPlan plan = plan_step(false);
            if (plan.empty()) {
                bool exports_wait = idle_prefix_work();
                std::unique_lock<std::mutex> lock(inbox_mutex_);
                if (stopping_ && inbox_.empty() && requests_.empty() && !exports_wait) break;
                // Requests wait only for prefix read-back here, exports for a host slot: look again shortly.
                bool waiting = !requests_.empty() || exports_wait;
                if (waiting) inbox_cv_.wait_for(lock, std::chrono::milliseconds(1));
                lock.unlock();
                take_inbox(!waiting);
                continue;
            }
            launch(plan);
            inflight = std::move(plan);
        }
        std::optional<StepPlan> next;
        if (config_.scheduler.async_scheduling) next = plan_step(true);
        try {
            StepOutput out = wait_step();
            auto host_start = std::chrono::steady_clock::now();
            commit(*inflight, out);
            record_prefixes(*inflight, true);
            // The executor is idle until the next launch.
            double drafting = draft_model_ ? draft_with_model(*inflight, out.features) : 0.0;
            // A step with drafts waits for this host work before the next one starts (no planning
            // ahead): its verification is part of what the step costs. Drafting is not: its cost
            // depends on the draft length, which the draft cost model prices.
            bool drafted = std::any_of(inflight->chunks.begin(), inflight->chunks.end(),
                                       [](const ScheduledChunk& c) { return c.seq->speculative; });
            double host = drafted ? seconds_between(host_start, std::chrono::steady_clock::now()) - drafting : 0.0;
            step_cost_.record(inflight->num_tokens(), out.seconds + host);
        } catch (const std::exception& e) {
            record_prefixes(*inflight, false);
            fail_everything(e.what());
            inflight.reset();
            continue;
        }
        take_inbox(false);
        // Drop planned chunks of sequences that just finished or were cancelled before
        // finish_done_requests() frees them; everything else was planned for this moment.
        if (next)
            std::erase_if(next->chunks, [](const ScheduledChunk& c) {
                return c.seq->finished() || c.seq->request->cancelled || c.seq->sample_late();
            });
        {
            std::lock_guard<std::mutex> lock(stats_mutex_);
            ++stats_.steps;
        }
        finish_done_requests();
        trace_.counter("running", static_cast<double>(scheduler_->num_running()));
        trace_.counter("waiting", static_cast<double>(scheduler_->num_waiting()));
        inflight.reset();
        if (next && !scheduler_->needs_sync() && !next->empty()) {
            launch(*next);
            inflight = std::move(next);
        }
    }
    if (prefix_cache_) prefix_cache_->end_exports();
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    for (auto& rs : inbox_) {
        if (rs->request.span_sink) rs->request.span_sink->on_done(0);
        RequestEvent ev{rs->id};
        ev.finished = true;
        ev.error = "the engine shut down";
        rs->stream->push(std::move(ev));
    }
}

}  // namespace deepinfer::runtime
