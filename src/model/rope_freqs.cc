#include "model/rope_freqs.h"

#include <algorithm>
#include <cmath>

namespace deepinfer::model {
namespace {

// Dimension at which a wavelength completes `rotations` turns over the original context.
double correction_dim(double rotations, int dim, double base, double max_pos) {
    return dim * std::log(max_pos / (rotations * 2 * M_PI)) / (2 * std::log(base));
}

}  // namespace

std::vector<float> rope_inv_freq(const RopeConfig& rope, int rope_dim) {
    int half = rope_dim / 2;
    std::vector<float> inv(half);
    float base = static_cast<float>(rope.theta);
    for (int i = 0; i < half; ++i) {
        // torch: base ** (arange(0, dim, 2).float() / dim) in fp32, then 1 / that.
        float exponent = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
        float pos_freq = std::pow(base, exponent);
        inv[i] = 1.0f / pos_freq;
        if (rope.type == "yarn") {
            double low = std::floor(correction_dim(rope.beta_fast, rope_dim, rope.theta, rope.original_max_position_embeddings));
            double high = std::ceil(correction_dim(rope.beta_slow, rope_dim, rope.theta, rope.original_max_position_embeddings));
            low = std::max(low, 0.0);
            high = std::min(high, static_cast<double>(rope_dim - 1));
            if (low == high) high += 0.001;
            float ramp = std::clamp(static_cast<float>((static_cast<float>(i) - low) / (high - low)), 0.0f, 1.0f);
            float extrapolation = 1.0f - ramp;
            float interpolation = 1.0f / (static_cast<float>(rope.factor) * pos_freq);
            inv[i] = interpolation * (1.0f - extrapolation) + inv[i] * extrapolation;
        }
    }
    return inv;
}

kernels::Rope make_rope(const RopeConfig& rope, int rope_dim, kernels::Backend& backend) {
    std::vector<float> inv = rope_inv_freq(rope, rope_dim);
    Tensor host = Tensor::empty(DType::kF32, {static_cast<int64_t>(inv.size())});
    std::copy(inv.begin(), inv.end(), host.data<float>());
    return kernels::Rope{backend.upload(host), rope_dim, static_cast<float>(rope.attention_factor)};
}

}  // namespace deepinfer::model
