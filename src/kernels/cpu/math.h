#pragma once
// Scalar math shared by the CPU ops and their references, written to match PyTorch's fp32
// definitions (softplus threshold 20, rope angle as one fp32 product).
#include <cmath>
#include <cstdint>

namespace deepinfer::kernels {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// cos and sin (times `scale`; sin negated for the inverse rotation) of one angle.
inline void rope_angle(int64_t position, float inv_freq, float scale, bool inverse, float& c, float& s) {
    float angle = static_cast<float>(position) * inv_freq;
    c = static_cast<float>(std::cos(static_cast<double>(angle))) * scale;
    s = static_cast<float>(std::sin(static_cast<double>(angle))) * scale;
    if (inverse) s = -s;
}

// Rotates one pair of channels.
inline void rope_pair(float* r, float c, float s) {
    float a = r[0], b = r[1];
    r[0] = a * c - b * s;
    r[1] = b * c + a * s;
}

// All of one position's angles, for rows that share it.
inline void rope_angles(int64_t position, const float* inv_freq, int rope_dim, float scale, bool inverse, float* c,
                        float* s) {
    for (int i = 0; i < rope_dim / 2; ++i) rope_angle(position, inv_freq[i], scale, inverse, c[i], s[i]);
}

// Rotates the last rope_dim columns of one row by angles from rope_angles.
inline void rope_apply(float* x, int64_t cols, int rope_dim, const float* c, const float* s) {
    float* r = x + cols - rope_dim;
    for (int i = 0; i < rope_dim / 2; ++i) rope_pair(r + 2 * i, c[i], s[i]);
}

// Rotates the trailing `rope_dim` channels of one row by the angles of `position`.
inline void rope_row(float* x, int64_t cols, int64_t position, const float* inv_freq, int rope_dim, float scale,
                     bool inverse) {
    float* r = x + cols - rope_dim;
    for (int i = 0; i < rope_dim / 2; ++i) {
        float c, s;
        rope_angle(position, inv_freq[i], scale, inverse, c, s);
        rope_pair(r + 2 * i, c, s);
    }
}

}  // namespace deepinfer::kernels
