#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/cpu/math.h"
#include "kernels/ref/ref_backend_impl.h"

namespace deepinfer::kernels::ref {

double weight_value(const Tensor& w, int64_t i) {
    switch (w.dtype()) {
        case DType::kBF16: return bf16_to_f32(w.data<uint16_t>()[i]);
        case DType::kF32: return w.data<float>()[i];
        default: fail("reference backend: unsupported weight dtype {}", dtype_name(w.dtype()));
    }
}

Tensor RefBackend::empty(DType dtype, std::vector<int64_t> shape) { return Tensor::empty(dtype, std::move(shape)); }
Tensor RefBackend::zeros(DType dtype, std::vector<int64_t> shape) { return Tensor::zeros(dtype, std::move(shape)); }
Tensor RefBackend::upload(const Tensor& host) { return host; }
void RefBackend::download(const Tensor& src, void* dst) { std::memcpy(dst, src.raw(), src.nbytes()); }

void RefBackend::embed(const Tensor& ids, const Tensor& table, int hc, Tensor& out) {
    int64_t d = table.dim(1);
    for (int64_t i = 0; i < ids.numel(); ++i) {
        int32_t id = ids.data<int32_t>()[i];
        DI_CHECK(id >= 0 && id < table.dim(0), "token id {} is out of range for a vocabulary of {}", id, table.dim(0));
        for (int s = 0; s < hc; ++s)
            for (int64_t c = 0; c < d; ++c)
                out.data<float>()[(i * hc + s) * d + c] = static_cast<float>(weight_value(table, id * d + c));
    }
}

void RefBackend::matmul(const Tensor& x, const Tensor& w, Tensor& y) {
    int64_t k = w.dim(-1), n = w.dim(0), m = x.numel() / k;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0.0;
            for (int64_t kk = 0; kk < k; ++kk) acc += x.data<float>()[i * k + kk] * weight_value(w, j * k + kk);
            y.data<float>()[i * n + j] = static_cast<float>(acc);
        }
}

void RefBackend::grouped_matmul(const Tensor& x, const Tensor& w, int groups, Tensor& y) {
    int64_t k = w.dim(-1), rows = w.dim(0) / groups, m = x.numel() / (groups * k);
    for (int64_t i = 0; i < m; ++i)
        for (int g = 0; g < groups; ++g)
            for (int64_t r = 0; r < rows; ++r) {
                double acc = 0.0;
                for (int64_t kk = 0; kk < k; ++kk)
                    acc += x.data<float>()[i * groups * k + g * k + kk] * weight_value(w, (g * rows + r) * k + kk);
                y.data<float>()[i * groups * rows + g * rows + r] = static_cast<float>(acc);
            }
}

void RefBackend::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& y) {
    int64_t cols = x.dim(-1), rows = x.numel() / cols;
    for (int64_t r = 0; r < rows; ++r) {
        double ss = 0.0;
        for (int64_t c = 0; c < cols; ++c) ss += std::pow(static_cast<double>(x.data<float>()[r * cols + c]), 2);
        double inv = 1.0 / std::sqrt(ss / cols + eps);
        for (int64_t c = 0; c < cols; ++c) {
            double v = x.data<float>()[r * cols + c] * inv;
            y.data<float>()[r * cols + c] = static_cast<float>(weight ? v * weight->data<float>()[c] : v);
        }
    }
}

void RefBackend::rope(Tensor& x, const Tensor& positions, int group, const Rope& r, bool inverse) {
    int64_t cols = x.dim(-1), rows = x.numel() / cols;
    for (int64_t row = 0; row < rows; ++row) {
        int64_t pos = positions.data<int64_t>()[row / group];
        float* v = x.data<float>() + row * cols + cols - r.rope_dim;
        for (int i = 0; i < r.rope_dim / 2; ++i) {
            double angle = static_cast<float>(pos) * r.inv_freq.data<float>()[i];  // one fp32 product, as torch
            double c = std::cos(angle) * r.scale, s = (inverse ? -std::sin(angle) : std::sin(angle)) * r.scale;
            double a = v[2 * i], b = v[2 * i + 1];
            v[2 * i] = static_cast<float>(a * c - b * s);
            v[2 * i + 1] = static_cast<float>(b * c + a * s);
        }
    }
}

void RefBackend::gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) {
    int64_t cols = x.numel() / x.dim(0);
    for (int64_t i = 0; i < rows.numel(); ++i)
        for (int64_t c = 0; c < cols; ++c)
            out.data<float>()[i * cols + c] = x.data<float>()[rows.data<int32_t>()[i] * cols + c];
}

void RefBackend::copy(const Tensor& src, Tensor& dst) {
    DI_CHECK(src.nbytes() == dst.nbytes(), "copy: {} vs {}", src.shape_string(), dst.shape_string());
    std::memcpy(dst.raw(), src.raw(), src.nbytes());
}

void RefBackend::argmax_rows(const Tensor& logits, Tensor& ids) {
    int64_t cols = logits.dim(-1), rows = logits.numel() / std::max<int64_t>(cols, 1);
    DI_CHECK(cols > 0 && ids.numel() == rows && ids.dtype() == DType::kI32, "argmax_rows: logits {} -> ids {}",
             logits.shape_string(), ids.shape_string());
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = logits.data<float>() + r * cols;
        int64_t best = 0;
        for (int64_t c = 1; c < cols; ++c)
            if (row[c] > row[best]) best = c;
        ids.data<int32_t>()[r] = static_cast<int32_t>(best);
    }
}

void RefBackend::apply_token_mask(Tensor& logits, const Tensor& rows, const Tensor& mask) {
    int64_t cols = logits.dim(-1), words = (cols + 31) / 32;
    DI_CHECK(mask.numel() == rows.numel() * words, "apply_token_mask: rows {}, mask {}", rows.shape_string(), mask.shape_string());
    for (int64_t i = 0; i < rows.numel(); ++i)
        for (int64_t v = 0; v < cols; ++v) {
            uint32_t word = static_cast<uint32_t>(mask.data<int32_t>()[i * words + v / 32]);
            if ((word & (1u << (v % 32))) == 0) logits.data<float>()[rows.data<int32_t>()[i] * cols + v] = -INFINITY;
        }
}

void RefBackend::add(const Tensor& x, Tensor& y) {
    for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] += x.data<float>()[i];
}

void RefBackend::swiglu(const Tensor& gate, const Tensor& up, float limit, Tensor& out) {
    for (int64_t i = 0; i < gate.numel(); ++i) {
        double g = std::min(gate.data<float>()[i], limit);
        double u = std::clamp(up.data<float>()[i], -limit, limit);
        out.data<float>()[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
    }
}

}  // namespace deepinfer::kernels::ref
