#include "core/quant_q8.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"

namespace deepinfer::q8 {
namespace {

float value_at(const Tensor& w, int64_t i) {
    return w.dtype() == DType::kBF16 ? bf16_to_f32(w.data<uint16_t>()[i]) : w.data<float>()[i];
}

}  // namespace

void quantize_row(const float* x, int64_t k, int8_t* codes, float* scales) {
    int64_t blocks = padded_blocks(k);
    for (int64_t b = 0; b < blocks; ++b) {
        int64_t begin = std::min(k, b * kBlock), end = std::min(k, begin + kBlock);
        float amax = 0.0f;
        for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(x[i]));
        float scale = amax / 127.0f;
        float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
        for (int64_t i = 0; i < kBlock; ++i) {
            int64_t at = b * kBlock + i;
            float q = at < k ? std::nearbyint(x[at] * inv) : 0.0f;
            codes[at] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
        }
        scales[b] = scale;
    }
}

Tensor quantize(const Tensor& w) {
    DI_CHECK(w.ndim() == 2 && (w.dtype() == DType::kBF16 || w.dtype() == DType::kF32),
             "q8: expected a bf16 or fp32 matrix, got {} {}", dtype_name(w.dtype()), w.shape_string());
    int64_t n = w.dim(0), k = w.dim(1), blocks = padded_blocks(k);
    Tensor out = Tensor::empty(DType::kQ8, {n, k});
    std::vector<float> row(k);
    std::vector<int8_t> codes(blocks * kBlock);
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t i = 0; i < k; ++i) row[i] = value_at(w, r * k + i);
        uint8_t* dst = out.data<uint8_t>() + r * row_bytes(k);
        quantize_row(row.data(), k, codes.data(), reinterpret_cast<float*>(dst + blocks * kBlock));
        for (int64_t i = 0; i < blocks * kBlock; ++i) dst[i] = static_cast<uint8_t>(codes[i] + kCodeOffset);
    }
    return out;
}

Tensor dequantize(const Tensor& q) {
    DI_CHECK(q.ndim() == 2 && q.dtype() == DType::kQ8, "q8::dequantize: expected a Q8 matrix");
    int64_t n = q.dim(0), k = q.dim(1), blocks = padded_blocks(k);
    Tensor out = Tensor::empty(DType::kF32, {n, k});
    for (int64_t r = 0; r < n; ++r) {
        const uint8_t* src = q.data<uint8_t>() + r * row_bytes(k);
        const float* scales = reinterpret_cast<const float*>(src + blocks * kBlock);
        for (int64_t i = 0; i < k; ++i)
            out.data<float>()[r * k + i] = static_cast<float>(src[i] - kCodeOffset) * scales[i / kBlock];
    }
    return out;
}

}  // namespace deepinfer::q8
