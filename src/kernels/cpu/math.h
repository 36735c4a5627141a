#pragma once
// Scalar math shared by the CPU ops and their references, written to match PyTorch's fp32
// definitions (softplus threshold 20, rope angle as one fp32 product).
#include <cmath>
#include <cstdint>

namespace deepinfer::kernels {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Rotates the trailing `rope_dim` channels of one row by the angles of `position`.
inline void rope_row(float* x, int64_t cols, int64_t position, const float* inv_freq, int rope_dim, float scale,
                     bool inverse) {
    float* r = x + cols - rope_dim;
    for (int i = 0; i < rope_dim / 2; ++i) {
        float angle = static_cast<float>(position) * inv_freq[i];
        float c = static_cast<float>(std::cos(static_cast<double>(angle))) * scale;
        float s = static_cast<float>(std::sin(static_cast<double>(angle))) * scale;
        if (inverse) s = -s;
        float a = r[2 * i], b = r[2 * i + 1];
        r[2 * i] = a * c - b * s;
        r[2 * i + 1] = b * c + a * s;
    }
}

}  // namespace deepinfer::kernels
