#pragma once
// Q8: weights quantized at load to 8 bits in blocks of 32 along a row, one fp32 scale per block
// (the symmetric scheme of llama.cpp's Q8_0: scale = max|w| / 127, code = round(w / scale)).
//
// A row of k values is stored as `padded_blocks(k)` blocks (k rounded up to an even number of
// blocks, so kernels read whole 64-byte chunks): first every code, as an unsigned byte holding
// code + 128 (the form VNNI's unsigned-by-signed dot product takes), padding codes 128 (zero);
// then every block's fp32 scale, padding scales 0.
#include <cstdint>

#include "core/tensor.h"

namespace deepinfer::q8 {

inline constexpr int64_t kBlock = 32;
inline constexpr int kCodeOffset = 128;

inline int64_t padded_blocks(int64_t k) { return ((k + kBlock - 1) / kBlock + 1) / 2 * 2; }
inline int64_t row_bytes(int64_t k) { return padded_blocks(k) * (kBlock + 4); }

// Quantizes a bf16 or fp32 matrix [n, k] (rows may be views) into a new host tensor of kQ8.
Tensor quantize(const Tensor& w);
// The values a Q8 tensor stands for, as fp32 [n, k] (tests, accuracy reports).
Tensor dequantize(const Tensor& q);

// One row of k values into codes (signed, padded with zeros to padded_blocks(k) * 32) and one
// scale per block (padded with zeros): the same rounding for weights and activations.
void quantize_row(const float* x, int64_t k, int8_t* codes, float* scales);

}  // namespace deepinfer::q8
