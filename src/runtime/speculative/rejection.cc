#include "runtime/speculative/rejection.h"

#include <cmath>
#include <numeric>

#include "base/error.h"
#include "kernels/cpu/cpu_sampler.h"
#include "kernels/sampling_math.h"

namespace deepinfer::runtime {
namespace {

using kernels::sampling::random_bits53;
using kernels::sampling::weight_shift;

double total_of(const std::vector<uint64_t>& w) {
    return static_cast<double>(std::accumulate(w.begin(), w.end(), uint64_t{0}));
}

// max(p - q, 0) as integer weights on the sampler's scale (each below 2^S, so the sum is exact).
std::vector<uint64_t> residual_weights(const std::vector<uint64_t>& p, const std::vector<uint64_t>& q) {
    double tp = total_of(p), tq = total_of(q), scale = std::ldexp(1.0, weight_shift(static_cast<int64_t>(p.size())));
    std::vector<uint64_t> r(p.size(), 0);
    for (size_t y = 0; y < p.size(); ++y) {
        double d = static_cast<double>(p[y]) / tp - static_cast<double>(q[y]) / tq;
        if (d > 0) r[y] = static_cast<uint64_t>(d * scale);
    }
    return r;
}

}  // namespace

DraftVerdict verify_draft_distribution(std::span<const std::span<const float>> target,
                                       std::span<const std::span<const float>> draft, std::span<const int32_t> tokens,
                                       std::span<const kernels::SampleRow> rows, std::span<const kernels::LogitBias> bias,
                                       bool test_residual_from_target) {
    DI_CHECK(draft.size() == tokens.size() && target.size() >= tokens.size() && rows.size() >= tokens.size(),
             "speculative: {} drafts with {} target rows and {} draft rows", tokens.size(), target.size(), draft.size());
    DraftVerdict v;
    for (; v.kept < tokens.size(); ++v.kept) {
        const kernels::SampleRow& row = rows[v.kept];
        std::vector<uint64_t> p = kernels::cpu::kept_weights(target[v.kept], row, bias, nullptr);
        std::vector<uint64_t> q = kernels::cpu::kept_weights(draft[v.kept], row, {}, nullptr);
        int32_t x = tokens[v.kept];
        DI_CHECK(x >= 0 && static_cast<size_t>(x) < p.size() && p.size() == q.size(), "speculative: draft token {} out of range", x);
        double px = static_cast<double>(p[x]) / total_of(p), qx = static_cast<double>(q[x]) / total_of(q);
        double u = std::ldexp(static_cast<double>(random_bits53(row.seed, static_cast<uint64_t>(row.position), kAcceptLane)), -53);
        if (qx > 0 && u * qx < px) continue;  // kept with probability min(1, p(x) / q(x))
        std::vector<uint64_t> r = test_residual_from_target ? p : residual_weights(p, q);
        if (std::accumulate(r.begin(), r.end(), uint64_t{0}) == 0) r = p;  // p = q up to rounding (then u < 1 kept x)
        v.token = kernels::cpu::draw_weighted(r, random_bits53(row.seed, static_cast<uint64_t>(row.position), kResidualLane));
        return v;
    }
    return v;
}

}  // namespace deepinfer::runtime
