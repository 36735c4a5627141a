// Manifold-constrained hyper-connections (mHC) on the CPU: the mixing weights come from one small
// GEMM over the RMS-normalised, flattened streams; the rest is per-token arithmetic on hc x hc.
#include <cmath>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/math.h"

namespace deepinfer::kernels::cpu {
namespace {

// Normalises each token's flattened streams [N, hc*D] by its RMS (no weight).
Tensor normalized_flat(ThreadPool& pool, const Tensor& streams, float eps) {
    int64_t n = streams.dim(0), width = n == 0 ? 0 : streams.numel() / n;
    Tensor flat = Tensor::empty(DType::kF32, {n, width});
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            const float* in = streams.data<float>() + i * width;
            float* out = flat.data<float>() + i * width;
            double ss = 0.0;
            for (int64_t c = 0; c < width; ++c) ss += static_cast<double>(in[c]) * in[c];
            float inv = 1.0f / std::sqrt(static_cast<float>(ss / width) + eps);
            for (int64_t c = 0; c < width; ++c) out[c] = in[c] * inv;
        }
    });
    return flat;
}

// comb (hc x hc, row-major [j][k]) -> softmax over k, + eps, then Sinkhorn: column sums first,
// then alternating row / column normalisation, `iters` normalisations of each kind in total.
void sinkhorn(float* comb, int hc, int iters, float eps) {
    for (int j = 0; j < hc; ++j) {
        float* row = comb + j * hc;
        float mx = row[0];
        for (int k = 1; k < hc; ++k) mx = std::max(mx, row[k]);
        float sum = 0.0f;
        for (int k = 0; k < hc; ++k) sum += (row[k] = std::exp(row[k] - mx));
        for (int k = 0; k < hc; ++k) row[k] = row[k] / sum + eps;
    }
    auto normalize_columns = [&] {
        for (int k = 0; k < hc; ++k) {
            float sum = 0.0f;
            for (int j = 0; j < hc; ++j) sum += comb[j * hc + k];
            for (int j = 0; j < hc; ++j) comb[j * hc + k] /= sum + eps;
        }
    };
    normalize_columns();
    for (int it = 0; it + 1 < iters; ++it) {
        for (int j = 0; j < hc; ++j) {
            float sum = 0.0f;
            for (int k = 0; k < hc; ++k) sum += comb[j * hc + k];
            for (int k = 0; k < hc; ++k) comb[j * hc + k] /= sum + eps;
        }
        normalize_columns();
    }
}

// out[D] = Σ_j weights[j] * streams[j][D].
void collapse(const float* streams, const float* weights, int hc, int64_t d, float* out) {
    for (int64_t c = 0; c < d; ++c) out[c] = 0.0f;
    for (int j = 0; j < hc; ++j)
        for (int64_t c = 0; c < d; ++c) out[c] += weights[j] * streams[j * d + c];
}

}  // namespace

// Per token: pre [hc] (sigmoid + eps), post [hc] and Sinkhorn-normalised comb [hc, hc].
void CpuBackend::mix_coefficients(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                                  const MhcParams& p, float* pre, Tensor& post, Tensor& comb) {
    int hc = p.hc;
    int64_t n = streams.dim(0), d = streams.dim(2);
    int64_t width = (2 + hc) * hc;
    DI_CHECK(fn.dim(0) == width && fn.dim(1) == hc * d, "mHC: fn {} does not match hc={} D={}", fn.shape_string(), hc,
             d);
    Tensor flat = normalized_flat(pool_, streams, p.norm_eps);
    std::vector<float> mixes(n * width);
    gemm(flat.data<float>(), hc * d, fn, mixes.data(), width, n);
    const float* b = base.data<float>();
    const float* s = scale.data<float>();
    pool_.parallel_for(n, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const float* m = mixes.data() + i * width;
            float* po = post.data<float>() + i * hc;
            float* cb = comb.data<float>() + i * hc * hc;
            for (int j = 0; j < hc; ++j) {
                pre[i * hc + j] = sigmoid(m[j] * s[0] + b[j]) + p.hc_eps;
                po[j] = 2.0f * sigmoid(m[hc + j] * s[1] + b[hc + j]);
            }
            for (int j = 0; j < hc * hc; ++j) cb[j] = m[2 * hc + j] * s[2] + b[2 * hc + j];
            sinkhorn(cb, hc, p.sinkhorn_iters, p.hc_eps);
        }
    });
}

void CpuBackend::hc_pre(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                        const MhcParams& p, Tensor& collapsed, Tensor& post, Tensor& comb) {
    std::vector<float> pre(streams.dim(0) * p.hc);
    mix_coefficients(streams, fn, base, scale, p, pre.data(), post, comb);
    Tensor pre_t = Tensor::wrap(pre.data(), DType::kF32, {streams.dim(0), p.hc}, nullptr);
    hc_collapse(streams, pre_t, collapsed);
}

void CpuBackend::hc_mix(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                        const MhcParams& p, Tensor& pre, Tensor& post, Tensor& comb) {
    mix_coefficients(streams, fn, base, scale, p, pre.data<float>(), post, comb);
}

void CpuBackend::hc_collapse(const Tensor& streams, const Tensor& pre, Tensor& out) {
    int64_t n = streams.dim(0), hc = streams.dim(1), d = streams.dim(2);
    DI_CHECK(pre.dim(0) == n && pre.dim(1) == hc, "hc_collapse: pre {} does not match streams {}", pre.shape_string(),
             streams.shape_string());
    pool_.parallel_for(n, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
            collapse(streams.data<float>() + i * hc * d, pre.data<float>() + i * hc, static_cast<int>(hc), d,
                     out.data<float>() + i * d);
    });
}

void CpuBackend::hc_post(Tensor& streams, const Tensor& y, const Tensor& post, const Tensor& comb) {
    int64_t n = streams.dim(0), hc = streams.dim(1), d = streams.dim(2);
    pool_.parallel_for(n, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> old(hc * d);
        for (int64_t i = begin; i < end; ++i) {
            float* x = streams.data<float>() + i * hc * d;
            const float* yi = y.data<float>() + i * d;
            const float* po = post.data<float>() + i * hc;
            const float* cb = comb.data<float>() + i * hc * hc;
            std::copy(x, x + hc * d, old.begin());
            for (int64_t k = 0; k < hc; ++k) {
                float* out = x + k * d;
                for (int64_t c = 0; c < d; ++c) out[c] = po[k] * yi[c];
                for (int64_t j = 0; j < hc; ++j) {
                    float w = cb[j * hc + k];
                    const float* src = old.data() + j * d;
                    for (int64_t c = 0; c < d; ++c) out[c] += w * src[c];
                }
            }
        }
    });
}

void CpuBackend::hc_head(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                         const MhcParams& p, Tensor& out) {
    int hc = p.hc;
    int64_t n = streams.dim(0), d = streams.dim(2);
    Tensor flat = normalized_flat(pool_, streams, p.norm_eps);
    std::vector<float> mixes(n * hc);
    gemm(flat.data<float>(), hc * d, fn, mixes.data(), hc, n);
    const float* b = base.data<float>();
    float s = scale.data<float>()[0];
    pool_.parallel_for(n, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> pre(hc);
        for (int64_t i = begin; i < end; ++i) {
            for (int j = 0; j < hc; ++j) pre[j] = sigmoid(mixes[i * hc + j] * s + b[j]) + p.hc_eps;
            collapse(streams.data<float>() + i * hc * d, pre.data(), hc, d, out.data<float>() + i * d);
        }
    });
}

void CpuBackend::engram_gate(Tensor& streams, const Tensor& kv, const Tensor& weight, float eps) {
    int64_t n = streams.dim(0), hc = streams.dim(1), d = streams.dim(2);
    DI_CHECK(kv.dim(1) == (hc + 1) * d && weight.dim(0) == hc && weight.dim(1) == d,
             "engram_gate: kv {} / weight {} do not match streams {}", kv.shape_string(), weight.shape_string(),
             streams.shape_string());
    pool_.parallel_for(n, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const float* value = kv.data<float>() + (i * (hc + 1) + hc) * d;
            for (int64_t j = 0; j < hc; ++j) {
                float* h = streams.data<float>() + (i * hc + j) * d;
                const float* key = kv.data<float>() + (i * (hc + 1) + j) * d;
                const float* w = weight.data<float>() + j * d;
                double hh = 0.0, kk = 0.0, dot = 0.0;
                for (int64_t c = 0; c < d; ++c) {
                    hh += static_cast<double>(h[c]) * h[c];
                    kk += static_cast<double>(key[c]) * key[c];
                    dot += static_cast<double>(h[c]) * w[c] * key[c];
                }
                float rstd = (1.0f / std::sqrt(static_cast<float>(hh / d) + eps)) * (1.0f / std::sqrt(static_cast<float>(kk / d) + eps));
                float t = static_cast<float>(dot) * rstd / std::sqrt(static_cast<float>(d));
                float g = sigmoid(std::copysign(std::sqrt(std::max(std::fabs(t), 1e-6f)), t));
                for (int64_t c = 0; c < d; ++c) h[c] += g * value[c];
            }
        }
    });
}

}  // namespace deepinfer::kernels::cpu
