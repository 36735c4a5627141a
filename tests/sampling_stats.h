#pragma once
// The distribution a sampler must follow, computed on its own terms (double arithmetic, std::exp,
// a full sort), and a chi-square test of observed token counts against it. Shared by the host
// sampler's tests and the backends' sampling tests.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace deepinfer::test {

struct FilterParams {
    double temperature = 1.0;
    int top_k = 0;       // 0: off
    double top_p = 1.0;  // 1: off
    double min_p = 0.0;  // 0: off
};

// softmax(z / temperature), then top-k, top-p (relative to the whole distribution: the shortest
// run of most probable tokens reaching top_p), min-p (p >= min_p · max p), renormalised.
inline std::vector<double> exact_distribution(const std::vector<double>& z, const FilterParams& f) {
    double max_z = *std::max_element(z.begin(), z.end()), sum = 0.0;
    std::vector<double> p(z.size());
    for (size_t i = 0; i < z.size(); ++i) sum += p[i] = std::exp((z[i] - max_z) / f.temperature);
    for (double& x : p) x /= sum;
    std::vector<size_t> order(z.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
    size_t keep = f.top_k > 0 ? std::min(order.size(), static_cast<size_t>(f.top_k)) : order.size();
    double cum = 0.0;
    for (size_t i = 0; i < keep && f.top_p < 1.0; ++i)
        if ((cum += p[order[i]]) >= f.top_p) keep = i + 1;
    std::vector<double> kept(z.size(), 0.0);
    double total = 0.0;
    for (size_t i = 0; i < keep; ++i)
        if (p[order[i]] >= f.min_p * p[order[0]]) total += kept[order[i]] = p[order[i]];
    for (double& x : kept) x /= total;
    return kept;
}

// The chi-square quantile of `dof` degrees of freedom at `z` standard deviations of the upper
// tail (Wilson-Hilferty).
inline double chi_square_quantile(int dof, double z) {
    double v = 2.0 / (9.0 * dof);
    return dof * std::pow(1.0 - v + z * std::sqrt(v), 3.0);
}

struct ChiSquare {
    double statistic = 0.0, critical = 0.0;
    int dof = 0;
    bool zero_probability_drawn = false;
    bool passes() const { return !zero_probability_drawn && statistic <= critical; }
    std::string describe() const {
        std::ostringstream s;
        s << "chi-square " << statistic << " on " << dof << " degrees of freedom (critical " << critical
          << " at significance 0.001)" << (zero_probability_drawn ? ", and a token of probability 0 was drawn" : "");
        return s.str();
    }
};

// Pearson's chi-square of `counts` (over `draws`) against `probs`, tokens grouped from the most
// probable down into bins of at least 20 expected draws; the critical value at significance 0.001
// by the Wilson-Hilferty approximation.
inline ChiSquare chi_square(const std::vector<double>& probs, const std::vector<int64_t>& counts, int64_t draws) {
    ChiSquare c;
    std::vector<size_t> order(probs.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return probs[a] > probs[b]; });
    std::vector<std::pair<double, double>> bins;  // (expected, observed)
    double expected = 0.0, observed = 0.0;
    for (size_t i : order) {
        if (probs[i] == 0.0) {
            c.zero_probability_drawn = c.zero_probability_drawn || counts[i] > 0;
            continue;
        }
        expected += probs[i] * static_cast<double>(draws);
        observed += static_cast<double>(counts[i]);
        if (expected >= 20.0) bins.emplace_back(expected, observed), expected = observed = 0.0;
    }
    if (bins.empty()) bins.emplace_back(0.0, 0.0);
    bins.back().first += expected, bins.back().second += observed;
    for (const auto& [e, o] : bins)
        if (e > 0.0) c.statistic += (o - e) * (o - e) / e;
    c.dof = std::max<int>(1, static_cast<int>(bins.size()) - 1);
    c.critical = chi_square_quantile(c.dof, 3.0902);  // the standard normal's 0.999 quantile
    return c;
}

}  // namespace deepinfer::test
