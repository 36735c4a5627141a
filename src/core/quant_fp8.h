#pragma once
// FP8 weights kept 8-bit in memory (DType::kFp8), as the releases store their dense linears: OCP
// e4m3 codes with one power-of-two scale per block of rows and columns (128 x 128 in the
// releases). A packed row holds its k codes, then one byte per 32 inputs: the exponent of their
// block's scale as an E8M0 byte (2^(e - 127)), so that rows stand alone as Q8 and MXFP4 rows do.
// Only weights whose every value times its scale is a normal number are packed: decoding is then
// exact in fp32 and in bf16, and a product has the bits of the same product over the weights
// widened at load.
#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace deepinfer::fp8 {

inline constexpr int64_t kScaleColumns = 32;

int64_t row_bytes(int64_t k);

// Whether pack() can keep these: k and the column blocks multiples of 32, no NaN
// codes, power-of-two scales 2^e with -117 <= e <= 119 (every nonzero e4m3 value, 2^-9 .. 448,
// times the scale stays normal).
bool packable(const Tensor& codes, const Tensor& scales, std::array<int, 2> block);
// From the checkpoint's codes [n, k] (F8_E4M3) and their block scales as fp32
// [ceil(n / block[0]), ceil(k / block[1])].
Tensor pack(const Tensor& codes, const Tensor& scales, std::array<int, 2> block);
// The k values of one packed row (row_bytes(k) bytes) into `out`.
void decode_row(const uint8_t* row, int64_t k, float* out);
// The values an FP8 tensor stands for, as fp32 [n, k].
Tensor dequantize(const Tensor& w);

}  // namespace deepinfer::fp8
