#pragma once
// Confidence-scheduled verification (DSpark paper, Algorithm 1): how many of its drafts each
// sequence verifies in a step. Draft j of sequence r is kept with probability a[r][j] (the product
// of the per-position confidences up to j); a step that verifies B tokens in all runs at SPS(B)
// steps per second. Candidates (r, j) are admitted in order of a, each after its predecessor,
// and the admitted prefix that maximises expected tokens per second, (rows + sum of admitted a)
// x SPS(B), is the plan. Keeping or dropping drafts never changes the output (their verification
// is lossless), only the speed.
#include <cstdint>
#include <vector>

namespace deepinfer::runtime {

// Step time as a function of the tokens a step computes (1 / SPS(B)), measured on the running
// engine: a moving average per token count. A count not measured yet is interpolated between
// the nearest measured ones, and above the largest below it costs what that one costs (an
// optimistic guess, so that larger verify batches get tried and measured). An average seldom
// updated takes most of its next sample (see blend in the .cc).
class StepCostModel {
public:
    void record(int64_t tokens, double seconds);
    bool ready() const { return measured_ > 0; }
    double seconds(int64_t tokens) const;  // ready() only

private:
    static constexpr int64_t kMaxTokens = 8192;  // larger steps count as this many
    static constexpr int kMinSamples = 2;
    std::vector<double> average_;
    std::vector<int> samples_;
    std::vector<int64_t> updated_;  // per count: records_ at its last sample
    int64_t records_ = 0;
    int measured_ = 0;  // token counts with kMinSamples samples
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

// Drafting time as a function of the draft length K (a draft model after a step, for all its
// sequences): a moving average per K, like StepCostModel's. A length not measured is interpolated between measured
// ones, extrapolated along the line through the two nearest beyond them (never falling), and
// with one length measured, taken as proportional to K + 1 (one draft step per position, the
// step that takes the commits in included), which the measurements then correct.
class DraftCostModel {
public:
    void record(int length, double seconds);
    bool ready() const { return !measured_.empty(); }
    double seconds(int length) const;  // ready() only

private:
    std::vector<double> average_;
    std::vector<int64_t> updated_;  // per length: records_ at its last sample
    int64_t records_ = 0;
    std::vector<int> measured_;  // lengths with a sample, ascending
};

// The draft length (0..confidences.size()) for the next step of `sequences` decoding sequences:
// drafting K costs draft.seconds(K), verifying them makes a step of sequences * (1 + K) tokens,
// and a sequence keeps 1 + sum over j < K of a_j tokens (a_j: the product of confidences[0..j]).
// The K with the most expected tokens per second of step plus drafting; all of them until both
// costs are measured.
int plan_draft_length(const std::vector<double>& confidences, int64_t sequences, const StepCostModel& step,
                      const DraftCostModel& draft);

// The verify length of each sequence (at most confidences[r].size()): `base_rows` tokens are in the
// step whatever is chosen (one per decoding sequence, plus prefill), confidences[r][j] is the
// chance draft j of sequence r is kept once its predecessors were.
std::vector<int> plan_verify_lengths(const std::vector<std::vector<double>>& confidences, int64_t base_rows,
                                     const StepCostModel& cost);

}  // namespace deepinfer::runtime
