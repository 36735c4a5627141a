#include "core/quant_fp8.h"

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "core/dtype.h"

namespace deepinfer::fp8 {
namespace {


bool is_nan_code(uint8_t c) { return (c & 0x7F) == 0x7F; }

bool scale_keeps_values_normal(float s) {
    int e = 0;
    return s > 0 && std::frexp(s, &e) == 0.5f && e - 1 >= -117 && e - 1 <= 119;
}

}  // namespace

int64_t row_bytes(int64_t k) { return k + k / kScaleColumns; }

bool packable(const Tensor& codes, const Tensor& scales, std::array<int, 2> block) {
    if (codes.ndim() != 2 || codes.dim(1) % 32 != 0 || block[0] <= 0 || block[1] % kScaleColumns != 0) return false;
    for (int64_t i = 0; i < scales.numel(); ++i)
        if (!scale_keeps_values_normal(scales.data<float>()[i])) return false;
    for (int64_t i = 0; i < codes.numel(); ++i)
        if (is_nan_code(codes.data<uint8_t>()[i])) return false;
    return true;
}

Tensor pack(const Tensor& codes, const Tensor& scales, std::array<int, 2> block) {
    DI_CHECK(packable(codes, scales, block), "fp8::pack: codes {} with scales {} in blocks {}x{} cannot be kept as FP8",
             codes.shape_string(), scales.shape_string(), block[0], block[1]);
    int64_t n = codes.dim(0), k = codes.dim(1);
    DI_CHECK(scales.ndim() == 2 && scales.dim(0) == (n + block[0] - 1) / block[0] &&
                 scales.dim(1) == (k + block[1] - 1) / block[1],
             "fp8::pack: scales {} do not cover [{}, {}] in blocks {}x{}", scales.shape_string(), n, k, block[0], block[1]);
    Tensor out = Tensor::zeros(DType::kFp8, {n, k});
    for (int64_t r = 0; r < n; ++r) {
        uint8_t* dst = out.data<uint8_t>() + r * row_bytes(k);
        std::memcpy(dst, codes.data<uint8_t>() + r * k, static_cast<size_t>(k));
        for (int64_t b = 0; b < k / kScaleColumns; ++b) {
            int e = 0;
            std::frexp(scales.data<float>()[(r / block[0]) * scales.dim(1) + b * kScaleColumns / block[1]], &e);
            dst[k + b] = static_cast<uint8_t>(e - 1 + 127);
        }
    }
    return out;
}

void decode_row(const uint8_t* row, int64_t k, float* out) {
    for (int64_t i = 0; i < k; ++i) out[i] = e4m3_to_f32(row[i]) * std::ldexp(1.0f, row[k + i / kScaleColumns] - 127);
}

Tensor dequantize(const Tensor& w) {
    DI_CHECK(w.ndim() == 2 && w.dtype() == DType::kFp8, "fp8::dequantize: expected an FP8 matrix");
    int64_t n = w.dim(0), k = w.dim(1);
    Tensor out = Tensor::empty(DType::kF32, {n, k});
    for (int64_t r = 0; r < n; ++r) decode_row(w.data<uint8_t>() + r * row_bytes(k), k, out.data<float>() + r * k);
    return out;
}

}  // namespace deepinfer::fp8
