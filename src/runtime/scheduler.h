#pragma once
// Continuous batching. Each step gets a token budget, spent in this order: every decoding sequence
// takes its one token (highest priority first, then FCFS); then waiting requests are admitted,
// each with a first prompt chunk of at most max_prefill_chunk tokens; then prompts already being
// prefilled share what is left, oldest first. So a new request starts within a step of arriving
// (when a sequence slot and blocks are free) however long the prompts in progress are, and long
// prompts are prefilled in pieces alongside decode. A waiting sequence is admitted when a cache
// slot is free and blocks for its first chunk can be reserved; when a running sequence cannot
// get blocks, the lowest-priority, most recently arrived resident sequence is preempted: its
// cache is freed and it is recomputed later (its sampled tokens are kept, and sampling is keyed
// by position, so recompute changes nothing).
//
// Not thread-safe: the engine thread drives it.
#include <cstdint>
#include <optional>
#include <vector>

#include "deepinfer/config.h"
#include "model/causal_lm.h"
#include "runtime/cache/prefix_cache.h"
#include "runtime/sequence.h"
#include "runtime/speculative/drafter.h"
#include "runtime/speculative/verify_planner.h"

namespace deepinfer::runtime {

struct ScheduledChunk {
    Sequence* seq = nullptr;
    int64_t start = 0;     // first position computed
    int64_t count = 0;     // tokens computed (the drafts included)
    bool samples = false;  // the chunk ends at the sequence's last token: sample the next one
    // Speculative decoding: tokens proposed after the sequence's last one, computed in the same
    // chunk (count = 1 + draft.size()); every position of the chunk samples.
    std::vector<int32_t> draft;
    // Logit rows the chunk samples.
    int64_t sample_rows() const { return samples ? 1 + static_cast<int64_t>(draft.size()) : 0; }
};

struct StepPlan {
    std::vector<ScheduledChunk> chunks;
    int64_t num_tokens() const;
    bool empty() const { return chunks.empty(); }
};

class Scheduler {
public:
    Scheduler(const SchedulerConfig& config, model::SequenceCache& cache) : config_(config), cache_(cache) {}

    void add(Sequence* seq);                  // new or preempted: to the waiting queue
    void remove(Sequence* seq);               // finished or cancelled: frees its cache
    // Plans the next step. With `ahead`, a step is in flight: sequences in it count their
    // in-flight tokens as computed, nothing is preempted, and a sequence that cannot get room is
    // left out (needs_sync() then tells the caller to plan again after the step lands).
    StepPlan schedule(bool ahead);
    bool needs_sync() const { return needs_sync_; }

    int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
    int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
    int64_t num_preemptions() const { return preemptions_; }
    // Prefix caching: queued sequences look up their cached prefix (and wait for its read-back),
    // admitted ones take it, prefill chunks end where the cache must save carries, and cached
    // spans nobody uses give their blocks up before a running sequence is preempted.
    void set_prefix_cache(PrefixCache* cache) { prefix_cache_ = cache; }
    // Speculative decoding: decoding sequences marked speculative take up to `max_draft` drafted
    // tokens in their chunk, as many as `cost` and `acceptance` make worth it (confidence-scheduled
    // verification; without them every draft found). Their next chunk depends on how many the step
    // keeps, so a plan made ahead leaves them out and asks for a sync.
    struct Speculation {
        const Drafter* drafter = nullptr;
        int max_draft = 0;
        const StepCostModel* cost = nullptr;
        const AcceptanceModel* acceptance = nullptr;
    };
    void set_speculation(const Speculation& s) { spec_ = s; }

private:
    void preempt(Sequence* s);
    bool make_room(Sequence* s, int64_t upto, const StepPlan& plan, bool ahead);
    // Decode tokens (`decodes`) or prompt chunks of sequences already admitted.
    void schedule_running(StepPlan& plan, int64_t& budget, bool ahead, bool decodes);
    int64_t first_chunk_cap() const;
    // Drafts for the decode chunks `chunks` of `plan` (speculative sequences' last tokens), within
    // the budget and the blocks free.
    void add_drafts(StepPlan& plan, int64_t& budget, const std::vector<size_t>& chunks);
    void admit_waiting(StepPlan& plan, int64_t& budget);
    // Prefix-cache hooks (no-ops without one).
    bool reserve_evicting(int state, int64_t upto);
    int64_t chunk_for(const Sequence* s, int64_t start, int64_t count) const;
    bool prefix_ready(const Sequence* s) const;
    void take_cached_prefix(Sequence* s, int state);
    void drop_cached_prefix(Sequence* s);

    SchedulerConfig config_;
    model::SequenceCache& cache_;
    PrefixCache* prefix_cache_ = nullptr;
    Speculation spec_;
    std::vector<Sequence*> waiting_, running_;
    int64_t preemptions_ = 0;
    bool needs_sync_ = false;
};

}  // namespace deepinfer::runtime
