// Fake quantisation by brute force: every representable value of the format is enumerated and
// the nearest one taken (a tie goes to the even code), independent of kernels/quant_grid.h.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ref/ref_backend_impl.h"

namespace deepinfer::kernels::ref {
namespace {

// Non-negative values of a float format with `mbits` mantissa bits, indexed by code.
std::vector<double> grid(int ebits, int mbits, int bias, double max_value) {
    std::vector<double> v;
    for (int e = 0; e < (1 << ebits); ++e)
        for (int m = 0; m < (1 << mbits); ++m) {
            double x = e == 0 ? std::ldexp(static_cast<double>(m) / (1 << mbits), 1 - bias)
                              : std::ldexp(1.0 + static_cast<double>(m) / (1 << mbits), e - bias);
            if (x <= max_value) v.push_back(x);
        }
    return v;
}

const std::vector<double>& e4m3() {
    static const std::vector<double> g = grid(4, 3, 7, 448.0);
    return g;
}
const std::vector<double>& e2m1() {
    static const std::vector<double> g = grid(2, 1, 1, 6.0);
    return g;
}

double nearest(const std::vector<double>& g, double v) {
    double mag = std::fabs(v);
    size_t best = 0;
    for (size_t i = 1; i < g.size(); ++i) {
        double d = std::fabs(g[i] - mag), bd = std::fabs(g[best] - mag);
        if (d < bd || (d == bd && i % 2 == 0)) best = i;
    }
    return std::copysign(g[best], v);
}

double pow2_at_least(double t) { return std::exp2(std::ceil(std::log2(t))); }

}  // namespace

void RefBackend::fake_quantize(Tensor& x, QuantFormat f) {
    int64_t cols = x.dim(-1), rows = cols == 0 ? 0 : x.numel() / cols;
    int block = f == QuantFormat::kFp4E4m3x16 ? 16 : 32;
    if (cols % block != 0) return;
    bool fp8 = f == QuantFormat::kFp8Ue8m0x32;
    double limit = fp8 ? 448.0 : 6.0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c0 = 0; c0 < cols; c0 += block) {
            float* b = x.data<float>() + r * cols + c0;
            double amax = 0.0;
            for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(static_cast<double>(b[i])));
            double scale = fp8 ? pow2_at_least(std::max(amax, 1e-4) / 448.0)
                         : f == QuantFormat::kFp4E4m3x16 ? nearest(e4m3(), std::max(amax, 6.0 * std::ldexp(1.0, -9)) / 6.0)
                                                         : pow2_at_least(std::max(amax, 6.0 * std::ldexp(1.0, -126)) / 6.0);
            for (int i = 0; i < block; ++i) {
                double q = std::fmin(std::fmax(b[i] / scale, -limit), limit);
                b[i] = static_cast<float>(nearest(fp8 ? e4m3() : e2m1(), q) * scale);
            }
        }
}

}  // namespace deepinfer::kernels::ref
