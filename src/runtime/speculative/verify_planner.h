#pragma once
// Confidence-scheduled verification (DSpark paper, Algorithm 1): how many of its drafts each
// sequence verifies in a step. Draft j of sequence r is kept with probability a[r][j] (the product
// of the per-position confidences up to j); a step that verifies B tokens in all runs at SPS(B)
// steps per second. Candidates (r, j) are admitted in order of a, each after its predecessor,
// and the admitted prefix that maximises expected tokens per second, (rows + sum of admitted a)
// x SPS(B), is the plan. Keeping or dropping drafts never changes the output (their verification
// is lossless), only the speed.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace deepinfer::runtime {

// Step time as a function of the tokens a step computes (1 / SPS(B)), measured on the running
// engine: a moving average per token count. A count not measured yet is interpolated between
// the nearest measured ones; above the largest it costs what that one costs (an optimistic guess,
// so that larger verify batches get tried and measured), below the smallest its share of that
// one's cost (a pessimistic one: early in a busy run only the prompts' large steps are measured,
// and decode steps read off them would make every draft look free). An average seldom
// updated takes most of its next sample (see blend in the .cc).
class StepCostModel {
public:
    void record(int64_t tokens, double seconds);
    bool ready() const { return measured_ > 0; }
    double seconds(int64_t tokens) const;  // ready() only

private:
    static constexpr int64_t kMaxTokens = 8192;  // larger steps count as this many
    static constexpr int kMinSamples = 2;
    // An average not updated in this many records is stale (say from the first, cold steps, at a
    // count the planner no longer chooses) and counts as not measured, so that it gets tried again.
    static constexpr int64_t kStaleAfter = 512;
    std::vector<double> average_;
    std::vector<int> samples_;
    std::vector<int64_t> updated_;  // per count: records_ at its last sample
    int64_t records_ = 0;
    int measured_ = 0;  // token counts with kMinSamples samples
    int64_t last_measured_update_ = 0;  // records_ when one of those last got a sample
};

// Per draft position, how often a draft there is kept once every draft before it was: the
// confidence of n-gram drafts (which have no confidence head). A position verified fewer than
// kExplore times counts as sure, so that every position gets measured.
class AcceptanceModel {
public:
    void record(int drafts, int kept);
    double confidence(int position) const;

private:
    static constexpr int64_t kExplore = 16;
    std::vector<int64_t> reached_, kept_;
};

// Drafting time as a function of the draft length K, for one number of sequences: a moving average
// per K, like StepCostModel's. A length not measured is interpolated between measured ones,
// extrapolated along the line through the two nearest beyond them (never falling), and with one
// length measured, taken as proportional to K + 1 (one draft step per position, the step that
// takes the commits in included), which the measurements then correct.
class DraftLengthCost {
public:
    void record(int length, double seconds, int64_t stamp);  // stamp: the caller's record count
    bool ready() const { return !measured_.empty(); }
    double seconds(int length) const;  // ready() only

private:
    std::vector<double> average_;
    std::vector<int64_t> updated_;  // per length: the stamp of its last sample
    std::vector<int> measured_;     // lengths with a sample, ascending
};

// Drafting time (a draft model after a step, for all its sequences) by draft length and number of
// drafting sequences: a DraftLengthCost per power-of-two bucket of sequences, since a draft
// model's step for 50 sequences costs more than for 5 and the number drafting swings (prefills,
// finished requests). A bucket not measured borrows its nearest measured neighbour's.
class DraftCostModel {
public:
    void record(int length, int64_t sequences, double seconds);
    bool ready() const { return records_ > 0; }
    double seconds(int length, int64_t sequences) const;  // ready() only

private:
    static size_t bucket(int64_t sequences);
    std::vector<DraftLengthCost> by_sequences_;
    int64_t records_ = 0;
};

// The draft length (0..confidences.size()) for the next step of `sequences` decoding sequences:
// drafting K costs draft.seconds(K, sequences) (at K = 0 the draft model only takes in the
// commits, keeping its context), verifying them makes a step of sequences * (1 + K) tokens, and
// a sequence keeps 1 + sum over j < K of a_j tokens (a_j: the product of confidences[0..j]). The
// K with the most expected tokens per second of step plus drafting; all of them until both costs
// are measured. `resting`: the draft model is not running, so length 0 costs no drafting at all.
int plan_draft_length(const std::vector<double>& confidences, int64_t sequences, const StepCostModel& step,
                      const DraftCostModel& draft, bool resting = false);

// The verify length of each sequence (at most confidences[r].size()): `base_rows` tokens are in the
// step whatever is chosen (one per decoding sequence, plus prefill), confidences[r][j] is the
// chance draft j of sequence r is kept once its predecessors were.
std::vector<int> plan_verify_lengths(const std::vector<std::vector<double>>& confidences, int64_t base_rows,
                                     const StepCostModel& cost);

}  // namespace deepinfer::runtime
