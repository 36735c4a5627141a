#include <cmath>
#include <vector>

#include "kernels/ref/ref_backend_impl.h"

namespace deepinfer::kernels::ref {
namespace {

double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// mixes[o] = Σ_c fn[o, c] * flat[c] / rms(flat)
std::vector<double> mixes_of(const float* flat, int64_t width, const Tensor& fn, int64_t outs, double eps) {
    double ss = 0.0;
    for (int64_t c = 0; c < width; ++c) ss += static_cast<double>(flat[c]) * flat[c];
    double inv = 1.0 / std::sqrt(ss / width + eps);
    std::vector<double> m(outs, 0.0);
    for (int64_t o = 0; o < outs; ++o)
        for (int64_t c = 0; c < width; ++c) m[o] += fn.data<float>()[o * width + c] * (flat[c] * inv);
    return m;
}

}  // namespace

void RefBackend::hc_pre(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                        const MhcParams& p, Tensor& collapsed, Tensor& post, Tensor& comb) {
    int hc = p.hc;
    int64_t n = streams.dim(0), d = streams.dim(2);
    const float* b = base.data<float>();
    const float* s = scale.data<float>();
    for (int64_t i = 0; i < n; ++i) {
        const float* x = streams.data<float>() + i * hc * d;
        auto m = mixes_of(x, hc * d, fn, (2 + hc) * hc, p.norm_eps);
        std::vector<double> pre(hc), c(hc * hc);
        for (int j = 0; j < hc; ++j) {
            pre[j] = sig(m[j] * s[0] + b[j]) + p.hc_eps;
            post.data<float>()[i * hc + j] = static_cast<float>(2.0 * sig(m[hc + j] * s[1] + b[hc + j]));
        }
        for (int j = 0; j < hc; ++j) {  // softmax over each row
            double mx = -1e300, sum = 0.0;
            for (int k = 0; k < hc; ++k) mx = std::max(mx, m[2 * hc + j * hc + k] * s[2] + b[2 * hc + j * hc + k]);
            for (int k = 0; k < hc; ++k) sum += c[j * hc + k] = std::exp(m[2 * hc + j * hc + k] * s[2] + b[2 * hc + j * hc + k] - mx);
            for (int k = 0; k < hc; ++k) c[j * hc + k] = c[j * hc + k] / sum + p.hc_eps;
        }
        auto cols = [&] {
            for (int k = 0; k < hc; ++k) {
                double sum = 0.0;
                for (int j = 0; j < hc; ++j) sum += c[j * hc + k];
                for (int j = 0; j < hc; ++j) c[j * hc + k] /= sum + p.hc_eps;
            }
        };
        cols();
        for (int it = 1; it < p.sinkhorn_iters; ++it) {
            for (int j = 0; j < hc; ++j) {
                double sum = 0.0;
                for (int k = 0; k < hc; ++k) sum += c[j * hc + k];
                for (int k = 0; k < hc; ++k) c[j * hc + k] /= sum + p.hc_eps;
            }
            cols();
        }
        for (int j = 0; j < hc * hc; ++j) comb.data<float>()[i * hc * hc + j] = static_cast<float>(c[j]);
        for (int64_t e = 0; e < d; ++e) {
            double acc = 0.0;
            for (int j = 0; j < hc; ++j) acc += pre[j] * x[j * d + e];
            collapsed.data<float>()[i * d + e] = static_cast<float>(acc);
        }
    }
}

void RefBackend::hc_post(Tensor& streams, const Tensor& y, const Tensor& post, const Tensor& comb) {
    int64_t n = streams.dim(0), hc = streams.dim(1), d = streams.dim(2);
    for (int64_t i = 0; i < n; ++i) {
        float* x = streams.data<float>() + i * hc * d;
        std::vector<float> old(x, x + hc * d);
        for (int64_t k = 0; k < hc; ++k)
            for (int64_t e = 0; e < d; ++e) {
                double acc = post.data<float>()[i * hc + k] * static_cast<double>(y.data<float>()[i * d + e]);
                for (int64_t j = 0; j < hc; ++j) acc += comb.data<float>()[(i * hc + j) * hc + k] * static_cast<double>(old[j * d + e]);
                x[k * d + e] = static_cast<float>(acc);
            }
    }
}

void RefBackend::hc_head(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                         const MhcParams& p, Tensor& out) {
    int hc = p.hc;
    int64_t n = streams.dim(0), d = streams.dim(2);
    for (int64_t i = 0; i < n; ++i) {
        const float* x = streams.data<float>() + i * hc * d;
        auto m = mixes_of(x, hc * d, fn, hc, p.norm_eps);
        for (int64_t e = 0; e < d; ++e) {
            double acc = 0.0;
            for (int j = 0; j < hc; ++j)
                acc += (sig(m[j] * scale.data<float>()[0] + base.data<float>()[j]) + p.hc_eps) * x[j * d + e];
            out.data<float>()[i * d + e] = static_cast<float>(acc);
        }
    }
}

void RefBackend::hc_mix(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                        const MhcParams& p, Tensor& pre, Tensor& post, Tensor& comb) {
    int hc = p.hc;
    int64_t n = streams.dim(0), d = streams.dim(2);
    Tensor collapsed = Tensor::empty(DType::kF32, {n, d});
    hc_pre(streams, fn, base, scale, p, collapsed, post, comb);
    for (int64_t i = 0; i < n; ++i) {
        auto m = mixes_of(streams.data<float>() + i * hc * d, hc * d, fn, (2 + hc) * hc, p.norm_eps);
        for (int j = 0; j < hc; ++j)
            pre.data<float>()[i * hc + j] =
                static_cast<float>(sig(m[j] * scale.data<float>()[0] + base.data<float>()[j]) + p.hc_eps);
    }
}

void RefBackend::hc_collapse(const Tensor& streams, const Tensor& pre, Tensor& out) {
    int64_t n = streams.dim(0), hc = streams.dim(1), d = streams.dim(2);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t e = 0; e < d; ++e) {
            double acc = 0.0;
            for (int64_t j = 0; j < hc; ++j)
                acc += static_cast<double>(pre.data<float>()[i * hc + j]) * streams.data<float>()[(i * hc + j) * d + e];
            out.data<float>()[i * d + e] = static_cast<float>(acc);
        }
}

void RefBackend::engram_gate(Tensor& streams, const Tensor& kv, const Tensor& weight, float eps) {
    int64_t n = streams.dim(0), hc = streams.dim(1), d = streams.dim(2);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < hc; ++j) {
            float* h = streams.data<float>() + (i * hc + j) * d;
            auto key = [&](int64_t c) { return static_cast<double>(kv.data<float>()[(i * (hc + 1) + j) * d + c]); };
            double hh = 0.0, kk = 0.0, dot = 0.0;
            for (int64_t c = 0; c < d; ++c) {
                hh += static_cast<double>(h[c]) * h[c] / d;
                kk += key(c) * key(c) / d;
                dot += h[c] * static_cast<double>(weight.data<float>()[j * d + c]) * key(c);
            }
            double t = dot / std::sqrt(hh + eps) / std::sqrt(kk + eps) / std::sqrt(static_cast<double>(d));
            double g = sig(std::copysign(std::sqrt(std::max(std::fabs(t), 1e-6)), t));
            for (int64_t c = 0; c < d; ++c) h[c] = static_cast<float>(h[c] + g * kv.data<float>()[(i * (hc + 1) + hc) * d + c]);
        }
}

}  // namespace deepinfer::kernels::ref
