#pragma once
// Scalar math shared by the CPU ops and their references, written to match PyTorch's fp32
// definitions (softplus threshold 20, rope angle as one fp32 product).
#include <cmath>
#include <cstdint>
#include <vector>

namespace deepinfer::kernels {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// cos and sin (times `scale`; sin negated for the inverse rotation) of one position's angles.
inline void rope_angles(int64_t position, const float* inv_freq, int rope_dim, float scale, bool inverse, float* c,
                        float* s) {
    for (int i = 0; i < rope_dim / 2; ++i) {
        float angle = static_cast<float>(position) * inv_freq[i];
        c[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * scale;
        s[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * scale;
        if (inverse) s[i] = -s[i];
    }
}

// Rotates the last rope_dim columns of one row by angles from rope_angles.
inline void rope_apply(float* x, int64_t cols, int rope_dim, const float* c, const float* s) {
    float* r = x + cols - rope_dim;
    for (int i = 0; i < rope_dim / 2; ++i) {
        float a = r[2 * i], b = r[2 * i + 1];
        r[2 * i] = a * c[i] - b * s[i];
        r[2 * i + 1] = b * c[i] + a * s[i];
    }
}

// Rotates the trailing `rope_dim` channels of one row by the angles of `position`.
inline void rope_row(float* x, int64_t cols, int64_t position, const float* inv_freq, int rope_dim, float scale,
                     bool inverse) {
    std::vector<float> cs(static_cast<size_t>(rope_dim));
    rope_angles(position, inv_freq, rope_dim, scale, inverse, cs.data(), cs.data() + rope_dim / 2);
    rope_apply(x, cols, rope_dim, cs.data(), cs.data() + rope_dim / 2);
}

}  // namespace deepinfer::kernels
