#include "runtime/speculative/verify_planner.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <tuple>

namespace deepinfer::runtime {

// A moving average whose new sample weighs 1 - keep^age, `age` the records (of any count) since
// this entry's last: an entry measured every time moves by 1 - keep per sample, one not measured
// for long (a length the planner seldom chooses) is mostly replaced by its fresh sample.
static double blend(double average, double sample, double keep, int64_t age) {
    double weight = 1.0 - std::pow(keep, static_cast<double>(std::max<int64_t>(age, 1)));
    return average + weight * (sample - average);
}

void StepCostModel::record(int64_t tokens, double seconds) {
    size_t at = static_cast<size_t>(std::clamp<int64_t>(tokens, 1, kMaxTokens));
    if (average_.size() <= at) average_.resize(at + 1), samples_.resize(at + 1);
    if (updated_.size() <= at) updated_.resize(at + 1);
    int& n = samples_[at];
    ++records_;
    average_[at] = n == 0 ? seconds : blend(average_[at], seconds, 0.9, records_ - updated_[at]);
    updated_[at] = records_;
    if (++n == kMinSamples) ++measured_;
    if (n >= kMinSamples) last_measured_update_ = records_;
}

double StepCostModel::seconds(int64_t tokens) const {
    int64_t at = std::clamp<int64_t>(tokens, 1, kMaxTokens), size = static_cast<int64_t>(average_.size());
    bool any_fresh = records_ - last_measured_update_ <= kStaleAfter;  // else the stale ones decide
    auto measured = [&](int64_t b) {
        return b >= 1 && b < size && samples_[b] >= kMinSamples && (!any_fresh || records_ - updated_[b] <= kStaleAfter);
    };
    if (measured(at)) return average_[at];
    int64_t lo = std::min(at, size - 1), hi = at;
    while (lo >= 1 && !measured(lo)) --lo;
    while (hi < size && !measured(hi)) ++hi;
    if (lo < 1) return average_[hi] * static_cast<double>(at) / static_cast<double>(hi);
    if (hi >= size) return average_[lo];
    double f = static_cast<double>(at - lo) / static_cast<double>(hi - lo);
    return average_[lo] + f * (average_[hi] - average_[lo]);
}

void AcceptanceModel::record(int drafts, int kept) {
    if (static_cast<int>(reached_.size()) < drafts) reached_.resize(drafts), kept_.resize(drafts);
    for (int j = 0; j < drafts && j <= kept; ++j) ++reached_[j];  // drafts before j were all kept
    for (int j = 0; j < kept; ++j) ++kept_[j];
}

double AcceptanceModel::confidence(int position) const {
    if (position >= static_cast<int>(reached_.size()) || reached_[position] < kExplore) return 1.0;
    return (static_cast<double>(kept_[position]) + 1.0) / (static_cast<double>(reached_[position]) + 2.0);
}

void DraftLengthCost::record(int length, double seconds, int64_t stamp) {
    size_t at = static_cast<size_t>(std::max(length, 0));
    if (average_.size() <= at) average_.resize(at + 1, -1.0);
    if (updated_.size() <= at) updated_.resize(at + 1);
    if (average_[at] < 0) {
        average_[at] = seconds;
        measured_.insert(std::upper_bound(measured_.begin(), measured_.end(), length), length);
    } else {
        average_[at] = blend(average_[at], seconds, 0.8, stamp - updated_[at]);
    }
    updated_[at] = stamp;
}

double DraftLengthCost::seconds(int length) const {
    auto above = std::lower_bound(measured_.begin(), measured_.end(), length);
    if (above != measured_.end() && *above == length) return average_[length];
    auto line = [&](int x0, int x1) {  // through the measured x0 < x1, never falling
        double slope = std::max(0.0, (average_[x1] - average_[x0]) / (x1 - x0));
        return std::max(0.0, average_[x0] + slope * (length - x0));
    };
    if (measured_.size() == 1) return average_[measured_[0]] * (length + 1) / (measured_[0] + 1);
    if (above == measured_.begin()) return line(measured_[0], measured_[1]);
    if (above == measured_.end()) return line(measured_[measured_.size() - 2], measured_.back());
    return line(*(above - 1), *above);
}

size_t DraftCostModel::bucket(int64_t sequences) {
    return static_cast<size_t>(std::bit_width(static_cast<uint64_t>(std::max<int64_t>(sequences, 1))) - 1);
}

void DraftCostModel::record(int length, int64_t sequences, double seconds) {
    size_t b = bucket(sequences);
    if (by_sequences_.size() <= b) by_sequences_.resize(b + 1);
    by_sequences_[b].record(length, seconds, ++records_);
}

double DraftCostModel::seconds(int length, int64_t sequences) const {
    // The nearest bucket measured; of two as near, the larger one (the costlier guess).
    size_t b = bucket(sequences), best = by_sequences_.size();
    auto distance = [&](size_t x) { return x > b ? x - b : b - x; };
    for (size_t i = 0; i < by_sequences_.size(); ++i)
        if (by_sequences_[i].ready() && (best == by_sequences_.size() || distance(i) <= distance(best))) best = i;
    return by_sequences_[best].seconds(length);
}

int plan_draft_length(const std::vector<double>& confidences, int64_t sequences, const StepCostModel& step,
                      const DraftCostModel& draft, bool resting) {
    int most = static_cast<int>(confidences.size());
    if (!step.ready() || !draft.ready() || sequences <= 0) return most;
    double n = static_cast<double>(sequences), kept = 1.0, a = 1.0, best_rate = 0.0;
    int best = 0;
    for (int k = 0; k <= most; ++k) {
        if (k > 0) kept += (a *= confidences[k - 1]);
        double drafting = k == 0 && resting ? 0.0 : draft.seconds(k, sequences);
        double rate = n * kept / (step.seconds(sequences * (1 + k)) + drafting);
        if (rate > best_rate) best_rate = rate, best = k;  // ties: the shorter draft
    }
    return best;
}

std::vector<int> plan_verify_lengths(const std::vector<std::vector<double>>& confidences, int64_t base_rows,
                                     const StepCostModel& cost) {
    std::vector<int> lengths(confidences.size(), 0);
    if (!cost.ready()) {  // nothing measured yet: verify every draft
        for (size_t r = 0; r < confidences.size(); ++r) lengths[r] = static_cast<int>(confidences[r].size());
        return lengths;
    }
    // (a, sequence, position): a is the product of the confidences up to the position.
    std::vector<std::tuple<double, size_t, int>> candidates;
    for (size_t r = 0; r < confidences.size(); ++r) {
        double a = 1.0;
        for (size_t j = 0; j < confidences[r].size(); ++j) {
            a *= confidences[r][j];
            candidates.emplace_back(a, r, static_cast<int>(j));
        }
    }
    // Higher a first; a sequence's positions stay in order (a never grows along them).
    std::stable_sort(candidates.begin(), candidates.end(), [](const auto& x, const auto& y) {
        return std::get<0>(x) > std::get<0>(y) || (std::get<0>(x) == std::get<0>(y) && std::get<2>(x) < std::get<2>(y));
    });
    double tokens = static_cast<double>(base_rows);
    int64_t rows = base_rows;
    double best = tokens / cost.seconds(rows);
    size_t best_prefix = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
        tokens += std::get<0>(candidates[i]);
        double rate = tokens / cost.seconds(++rows);
        if (rate > best) best = rate, best_prefix = i + 1;
    }
    for (size_t i = 0; i < best_prefix; ++i) {
        auto [a, r, j] = candidates[i];
        lengths[r] = std::max(lengths[r], j + 1);
    }
    return lengths;
}

}  // namespace deepinfer::runtime
