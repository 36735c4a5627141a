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
}

void Scheduler::remove(Sequence* seq) {
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
    s->window_from = s->compressed_until = 0;
    ++preemptions_;
    add(s);
}

// Reserves blocks for `s` up to position `upto`, preempting less important sequences that are
// not in this step. Returns false when `s` must sit this step out (preempted itself, or, with a
// step in flight, nothing may be preempted yet).
bool Scheduler::make_room(Sequence* s, int64_t upto, const StepPlan& plan, bool ahead) {
    while (!cache_.reserve(s->cache_state, upto)) {
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
        int64_t start = s->length_after_inflight(), count = std::min(todo, budget);
        if (!make_room(s, start + count, plan, ahead)) continue;
        plan.chunks.push_back({s, start, count, count == todo});
        budget -= count;
    }
}

void Scheduler::admit_waiting(StepPlan& plan, int64_t& budget) {
    while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < config_.max_running) {
        Sequence* s = waiting_.front();
        int state = cache_.try_add_sequence();
        if (state < 0) return;
        take_shared_prefix(s, state);
        int64_t todo = s->pending(), count = std::min({todo, budget, first_chunk_cap()});
        if (!cache_.reserve(state, s->num_computed + count)) {  // back-pressure: wait until blocks free up
            cache_.remove_sequence(state);
            s->num_computed = s->window_from = s->compressed_until = 0;
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

void Scheduler::take_shared_prefix(Sequence* s, int state) {
    int64_t align = cache_.prefix_alignment();
    if (replay_tokens_ <= 0 || align <= 0) return;
    Sequence* donor = nullptr;
    int64_t best = 0;
    for (Sequence* r : running_) {
        int64_t limit = std::min<int64_t>({r->num_computed, s->prompt_len - 1, static_cast<int64_t>(r->tokens.size())});
        int64_t common = 0;
        while (common < limit && r->tokens[common] == s->tokens[common]) ++common;
        common -= common % align;
        if (common > best) best = common, donor = r;
    }
    if (donor == nullptr || best <= replay_tokens_ || !cache_.share_prefix(donor->cache_state, state, best)) return;
    s->num_computed = best - replay_tokens_;  // the tail the rings need is computed again
    s->window_from = s->num_computed;
    s->compressed_until = best;
    prefix_tokens_reused_ += s->num_computed;
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
