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
    s->cache_state = s->draft_state = -1;  // the draft model's context goes with the cache state
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
    std::vector<size_t> drafting;             // chunks that may take drafts
    for (Sequence* s : order) {
        int64_t todo = s->pending();
        if (budget <= 0 || s->cache_state < 0 || todo <= 0 || (todo == 1) != decodes || in_plan(plan, s)) continue;
        bool speculative = decodes && s->speculative && spec_.drafter;
        if (speculative && ahead) {
            needs_sync_ = true;
            continue;
        }
        int64_t start = s->length_after_inflight(), count = chunk_for(s, start, std::min(todo, budget));
        if (!make_room(s, start + count, plan, ahead)) continue;
        if (speculative) drafting.push_back(plan.chunks.size());
        plan.chunks.push_back({s, start, count, count == todo});
        budget -= count;
    }
    if (!drafting.empty()) add_drafts(plan, budget, drafting);
}

void Scheduler::add_drafts(StepPlan& plan, int64_t& budget, const std::vector<size_t>& chunks) {
    std::vector<std::vector<int32_t>> drafts;
    std::vector<std::vector<double>> confidences;
    for (size_t i : chunks) {
        const ScheduledChunk& c = plan.chunks[i];
        const Sequence* s = c.seq;
        // The chunk samples after each draft: none at max_length or beyond.
        int64_t room = std::min<int64_t>(spec_.max_draft, s->max_length - 1 - static_cast<int64_t>(s->tokens.size()));
        bool modelled = s->drafted_for == static_cast<int64_t>(s->tokens.size());  // a draft model's, for now
        std::vector<int32_t> d = room <= 0 ? std::vector<int32_t>{}
                                 : modelled ? s->model_draft
                                            : spec_.drafter->propose(s->tokens, static_cast<int>(room));
        d.resize(static_cast<size_t>(chunk_for(s, c.start, 1 + std::min<int64_t>(room, static_cast<int64_t>(d.size()))) - 1));
        std::vector<double>& conf = confidences.emplace_back();
        for (size_t j = 0; j < d.size(); ++j)
            conf.push_back(modelled && j < s->model_confidence.size() ? s->model_confidence[j]
                           : spec_.acceptance                         ? spec_.acceptance->confidence(static_cast<int>(j))
                                                                      : 1.0);
        drafts.push_back(std::move(d));
    }
    std::vector<int> lengths(chunks.size());
    if (spec_.cost) lengths = plan_verify_lengths(confidences, plan.num_tokens(), *spec_.cost);
    else
        for (size_t k = 0; k < chunks.size(); ++k) lengths[k] = static_cast<int>(drafts[k].size());
    for (size_t k = 0; k < chunks.size() && budget > 0; ++k) {
        ScheduledChunk& c = plan.chunks[chunks[k]];
        int64_t take = std::min<int64_t>(lengths[k], budget);
        // More blocks for the drafts only where they are free: drafts never preempt anyone.
        if (take <= 0 || !reserve_evicting(c.seq->cache_state, c.start + 1 + take)) continue;
        c.draft.assign(drafts[k].begin(), drafts[k].begin() + take);
        c.count += take;
        budget -= take;
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
