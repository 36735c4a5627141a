#include "core/quant_mxfp4.h"

#include <cmath>

#include "base/error.h"
#include "core/quant_q8.h"

namespace deepinfer::mxfp4 {

int64_t row_bytes(int64_t k) { return q8::padded_blocks(k) * (16 + 4); }

bool packable(const Tensor& scales) {
    if (scales.dtype() != DType::kF32) return false;
    for (int64_t i = 0; i < scales.numel(); ++i) {
        float s = scales.data<float>()[i];
        int e = 0;
        if (!(s > 0) || std::frexp(s, &e) != 0.5f || e - 1 < -125 || e - 1 > 125) return false;
    }
    return true;
}

Tensor pack(const Tensor& codes, const Tensor& scales, int64_t k) {
    DI_CHECK(packable(scales), "mxfp4::pack: scales that are not powers of two within 2^-125 .. 2^125");
    int64_t n = codes.dim(0), blocks = q8::padded_blocks(k);
    DI_CHECK(k % 32 == 0 && codes.ndim() == 2 && codes.dim(1) == k / 2 && scales.dtype() == DType::kF32 &&
                 scales.numel() == n * (k / 32),
             "mxfp4::pack: codes {} and scales {} do not make [{}, {}]", codes.shape_string(), scales.shape_string(), n, k);
    Tensor out = Tensor::zeros(DType::kMxfp4, {n, k});
    for (int64_t r = 0; r < n; ++r) {
        const uint8_t* src = codes.data<uint8_t>() + r * (k / 2);
        uint8_t* dst = out.data<uint8_t>() + r * row_bytes(k);
        for (int64_t i = 0; i < k; ++i) {
            uint8_t code = (src[i / 2] >> (4 * (i % 2))) & 0xF;
            int64_t pair = i / 64, in_pair = i % 64;
            dst[pair * 32 + in_pair % 32] |= static_cast<uint8_t>(code << (in_pair >= 32 ? 4 : 0));
        }
        auto* s = reinterpret_cast<float*>(dst + blocks * 16);
        for (int64_t b = 0; b < k / 32; ++b) s[b] = scales.data<float>()[r * (k / 32) + b] * 0.5f;
    }
    return out;
}

void decode_row(const uint8_t* row, int64_t k, float* out) {
    const auto* s = reinterpret_cast<const float*>(row + q8::padded_blocks(k) * 16);
    for (int64_t i = 0; i < k; ++i) {
        int64_t pair = i / 64, in_pair = i % 64;
        uint8_t code = (row[pair * 32 + in_pair % 32] >> (in_pair >= 32 ? 4 : 0)) & 0xF;
        out[i] = kE2m1[code] * 2.0f * s[i / 32];
    }
}

Tensor dequantize(const Tensor& w) {
    DI_CHECK(w.ndim() == 2 && w.dtype() == DType::kMxfp4, "mxfp4::dequantize: expected an MXFP4 matrix");
    int64_t n = w.dim(0), k = w.dim(1);
    Tensor out = Tensor::empty(DType::kF32, {n, k});
    for (int64_t r = 0; r < n; ++r) decode_row(w.data<uint8_t>() + r * row_bytes(k), k, out.data<float>() + r * k);
    return out;
}

}  // namespace deepinfer::mxfp4
