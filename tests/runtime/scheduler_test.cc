// The scheduler alone, over a fake cache with a fixed number of slots and blocks: priorities and
// FCFS order of admission, the token budget (decode first, then prompt chunks), back-pressure
// when blocks run out, and preemption of the least important sequence.
#include "runtime/scheduler.h"

#include <gtest/gtest.h>

#include <map>

namespace deepinfer::runtime {
namespace {

// One block per `tokens_per_block` tokens; `blocks` in all.
class FakeCache final : public model::SequenceCache {
public:
    FakeCache(int slots, int blocks, int tokens_per_block) : slots_(slots), free_blocks_(blocks), per_block_(tokens_per_block) {}
    int try_add_sequence() override {
        for (int s = 0; s < slots_; ++s)
            if (!used_.count(s)) return used_[s] = 0, s;
        return -1;
    }
    void remove_sequence(int s) override {
        free_blocks_ += used_[s];
        used_.erase(s);
    }
    bool reserve(int s, int64_t tokens) override {
        int need = static_cast<int>((tokens + per_block_ - 1) / per_block_) - used_[s];
        if (need > free_blocks_) return false;
        if (need > 0) free_blocks_ -= need, used_[s] += need;
        return true;
    }
    void describe(model::Batch&) const override {}
    int free_sequences() const override { return slots_ - static_cast<int>(used_.size()); }
    int max_seqs() const override { return slots_; }
    double usage() const override { return 0; }
    int64_t bytes() const override { return 0; }
    std::vector<std::pair<std::string, int64_t>> bytes_by_kind() const override { return {}; }
    int64_t token_capacity() const override { return 1 << 20; }

private:
    int slots_, free_blocks_, per_block_;
    std::map<int, int> used_;
};

std::unique_ptr<Sequence> seq(int prompt_len, int priority, uint64_t arrival) {
    auto s = std::make_unique<Sequence>();
    s->tokens.assign(prompt_len, 7);
    s->prompt_len = prompt_len;
    s->priority = priority;
    s->arrival = arrival;
    return s;
}

// Commits a plan as if the step ran: computed tokens advance, samplers append one token.
void run(const StepPlan& plan) {
    for (const auto& c : plan.chunks) {
        c.seq->num_computed += c.count;
        if (c.samples) c.seq->tokens.push_back(1);
    }
}

TEST(Scheduler, PriorityThenArrivalOrderAndTokenBudget) {
    FakeCache cache(8, 1000, 16);
    SchedulerConfig cfg;
    cfg.max_batch_tokens = 20;
    Scheduler sched(cfg, cache);
    auto low = seq(10, 0, 0), high = seq(10, 5, 1), mid = seq(10, 1, 2), mid2 = seq(10, 1, 3);
    for (auto* s : {low.get(), high.get(), mid.get(), mid2.get()}) sched.add(s);
    StepPlan p = sched.schedule(false);
    ASSERT_EQ(p.chunks.size(), 2u);  // 20-token budget: two whole prompts
    EXPECT_EQ(p.chunks[0].seq, high.get());
    EXPECT_EQ(p.chunks[1].seq, mid.get());
    run(p);
    p = sched.schedule(false);  // decode for the two, then chunks of the next prompts
    ASSERT_GE(p.chunks.size(), 3u);
    EXPECT_EQ(p.chunks[0].count, 1);
    EXPECT_EQ(p.chunks[1].count, 1);
    EXPECT_EQ(p.chunks[2].seq, mid2.get());
    EXPECT_EQ(p.chunks[2].count, 10);
    EXPECT_EQ(p.num_tokens(), 20);
    EXPECT_EQ(p.chunks.back().seq, low.get());
    EXPECT_EQ(p.chunks.back().count, 8);  // a prompt split by the budget
    EXPECT_FALSE(p.chunks.back().samples);
}

// A long prompt being prefilled must not hold back a request that arrives meanwhile: the new one
// is admitted with its whole (short) prompt in the next step, and the long one takes the rest.
TEST(Scheduler, NewArrivalsShareTheStepWithALongPrefill) {
    FakeCache cache(8, 100000, 16);
    SchedulerConfig cfg;
    cfg.max_batch_tokens = 512;
    Scheduler sched(cfg, cache);
    auto long_prompt = seq(20000, 0, 0), short_prompt = seq(12, 0, 1);
    sched.add(long_prompt.get());
    StepPlan p = sched.schedule(false);
    ASSERT_EQ(p.chunks.size(), 1u);
    EXPECT_EQ(p.chunks[0].count, 256);  // a new request's first chunk: half the budget
    run(p);
    p = sched.schedule(false);
    ASSERT_EQ(p.chunks.size(), 1u);
    EXPECT_EQ(p.chunks[0].count, 512);  // alone, a running prefill takes the whole budget
    run(p);
    sched.add(short_prompt.get());
    p = sched.schedule(false);
    ASSERT_EQ(p.chunks.size(), 2u);
    EXPECT_EQ(p.chunks[0].seq, short_prompt.get());
    EXPECT_EQ(p.chunks[0].count, 12);
    EXPECT_TRUE(p.chunks[0].samples);
    EXPECT_EQ(p.chunks[1].seq, long_prompt.get());
    EXPECT_EQ(p.chunks[1].count, 500);
    cfg.max_prefill_chunk = 4;  // the cap is configurable
    Scheduler capped(cfg, cache);
    auto other = seq(12, 0, 2);
    capped.add(other.get());
    EXPECT_EQ(capped.schedule(false).chunks.at(0).count, 4);
}

TEST(Scheduler, BackPressureAndPreemption) {
    FakeCache cache(4, 4, 16);  // 4 blocks of 16 tokens in all
    SchedulerConfig cfg;
    cfg.max_batch_tokens = 64;
    Scheduler sched(cfg, cache);
    auto a = seq(30, 1, 0), b = seq(30, 0, 1), c = seq(10, 0, 2);
    for (auto* s : {a.get(), b.get(), c.get()}) sched.add(s);
    StepPlan p = sched.schedule(false);
    EXPECT_EQ(p.chunks.size(), 2u);  // c waits: no blocks left (back-pressure)
    EXPECT_EQ(sched.num_waiting(), 1);
    run(p);
    for (int i = 0; i < 2; ++i) run(sched.schedule(false));  // a and b decode to 32 tokens
    // a needs a third block for token 33: b (less important) is preempted.
    p = sched.schedule(false);
    EXPECT_EQ(sched.num_preemptions(), 1);
    EXPECT_EQ(b->cache_state, -1);
    EXPECT_EQ(b->num_computed, 0);
    ASSERT_FALSE(p.chunks.empty());
    EXPECT_EQ(p.chunks[0].seq, a.get());
}

}  // namespace
}  // namespace deepinfer::runtime
