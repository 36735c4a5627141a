#include "runtime/scheduler.h"

#include <algorithm>

namespace deepinfer::runtime {
namespace {

// Higher priority first, then earlier arrival.
bool before(const Sequence* a, const Sequence* b) {
    return a->priority != b->priority ? a->priority > b->priority : a->arrival < b->arrival;
}

bool in_plan(const StepPlan& plan, const Sequence* s) {
    return std::any_of(plan.chunks.begin(), plan.chunks.end(), [&](const ScheduledChunk& c) { return c.seq == s; });
}

}  // namespace

int64_t StepPlan::num_tokens() const {
    int64_t n = 0;
    for (const auto& c : chunks) n += c.count;
    return n;
}

void Scheduler::add(Sequence* seq) {
    waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq, before), seq);
    if (prefix_cache_) prefix_cache_->on_waiting(*seq);
}

void Scheduler::remove(Sequence* seq) {
    if (prefix_cache_) prefix_cache_->forget(*seq);
    std::erase(waiting_, seq);
    std::erase(running_, seq);
    if (seq->cache_state >= 0) cache_.remove_sequence(seq->cache_state);
    seq->cache_state = -1;
}

void Scheduler::preempt(Sequence* s) {
    std::erase(running_, s);
    cache_.remove_sequence(s->cache_state);
    s->cache_state = -1;
    s->num_computed = 0;
    s->window_from = s->compressed_until = s->indexed_until = 0;
    ++s->preemptions;
    ++preemptions_;
    add(s);
}

// Reserves blocks for `s` up to position `upto`, preempting less important sequences that are
// not in this step. Returns false when `s` must sit this step out (preempted itself, or, with a
// step in flight, nothing may be preempted yet).
bool Scheduler::make_room(Sequence* s, int64_t upto, const StepPlan& plan, bool ahead) {
    while (!reserve_evicting(s->cache_state, upto)) {
        if (ahead) {
            needs_sync_ = true;
            return false;
        }
        Sequence* victim = nullptr;
        for (Sequence* r : running_)
            if (r != s && !in_plan(plan, r) && (victim == nullptr || before(victim, r))) victim = r;
        if (victim == nullptr || !before(s, victim)) {
            preempt(s);
            return false;
        }
        preempt(victim);
    }
    return true;
}

void Scheduler::schedule_running(StepPlan& plan, int64_t& budget, bool ahead, bool decodes) {
    std::sort(running_.begin(), running_.end(), before);
    std::vector<Sequence*> order = running_;  // preemption edits running_
    for (Sequence* s : order) {
        int64_t todo = s->pending();
        if (budget <= 0 || s->cache_state < 0 || todo <= 0 || (todo == 1) != decodes || in_plan(plan, s)) continue;
        if (decodes && s->speculative && drafter_) {
            if (ahead) {
                needs_sync_ = true;
                continue;
            }
            if (auto chunk = draft_chunk(s, budget, plan)) {
                budget -= chunk->count;
                plan.chunks.push_back(std::move(*chunk));
            }
            continue;
        }
        int64_t start = s->length_after_inflight(), count = chunk_for(s, start, std::min(todo, budget));
        if (!make_room(s, start + count, plan, ahead)) continue;
        plan.chunks.push_back({s, start, count, count == todo});
        budget -= count;
    }
}

void Scheduler::admit_waiting(StepPlan& plan, int64_t& budget) {
    while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < config_.max_running) {
        Sequence* s = waiting_.front();
        if (!prefix_ready(s)) return;  // its cached prefix is still being read back
        int state = cache_.try_add_sequence();
        if (state < 0) return;
        take_cached_prefix(s, state);
        int64_t todo = s->pending(), count = chunk_for(s, s->num_computed, std::min({todo, budget, first_chunk_cap()}));
        if (!reserve_evicting(state, s->num_computed + count)) {  // back-pressure: wait until blocks free up
            cache_.remove_sequence(state);
            drop_cached_prefix(s);
            return;
        }
        s->cache_state = state;
        waiting_.erase(waiting_.begin());
        running_.push_back(s);
        plan.chunks.push_back({s, s->num_computed, count, count == todo});
        budget -= count;
    }
}

std::optional<ScheduledChunk> Scheduler::draft_chunk(Sequence* s, int64_t budget, const StepPlan& plan) {
    int64_t start = s->num_computed, length = static_cast<int64_t>(s->tokens.size());
    // The chunk computes positions start .. start + drafts and samples the tokens after each.
    int64_t room = std::min({static_cast<int64_t>(max_draft_), budget - 1, s->max_length - 1 - length});
    std::vector<int32_t> draft = room > 0 ? drafter_->propose(s->tokens, static_cast<int>(room)) : std::vector<int32_t>{};
    int64_t count = chunk_for(s, start, 1 + static_cast<int64_t>(draft.size()));
    draft.resize(static_cast<size_t>(count - 1));
    if (!make_room(s, start + count, plan, false)) return std::nullopt;
    return ScheduledChunk{s, start, count, true, std::move(draft)};
}

int64_t Scheduler::first_chunk_cap() const {
    return config_.max_prefill_chunk > 0 ? config_.max_prefill_chunk : std::max(1, config_.max_batch_tokens / 2);
}

bool Scheduler::reserve_evicting(int state, int64_t upto) {
    while (!cache_.reserve(state, upto))
        if (prefix_cache_ == nullptr || !prefix_cache_->evict_one()) return false;
    return true;
}

int64_t Scheduler::chunk_for(const Sequence* s, int64_t start, int64_t count) const {
    return prefix_cache_ ? prefix_cache_->chunk_count(*s, start, count) : count;
}

bool Scheduler::prefix_ready(const Sequence* s) const { return prefix_cache_ == nullptr || prefix_cache_->ready(*s); }

void Scheduler::take_cached_prefix(Sequence* s, int state) {
    if (prefix_cache_) prefix_cache_->take_prefix(*s, state);
}

void Scheduler::drop_cached_prefix(Sequence* s) {
    if (prefix_cache_) prefix_cache_->untake_prefix(*s);
    s->num_computed = s->window_from = s->compressed_until = 0;
}

StepPlan Scheduler::schedule(bool ahead) {
    needs_sync_ = false;
    StepPlan plan;
    int64_t budget = config_.max_batch_tokens;
    schedule_running(plan, budget, ahead, /*decodes=*/true);
    admit_waiting(plan, budget);
    schedule_running(plan, budget, ahead, /*decodes=*/false);
    return plan;
}

}  // namespace deepinfer::runtime
