#pragma once
// MXFP4 weights kept 4-bit in memory (DType::kMxfp4), as the releases store routed experts: e2m1
// codes with one power-of-two scale per 32 inputs. Rows are laid out for the Q8 kernels
// (kernels/cpu/gemm_q8.h), which multiply them by 8-bit activations: `q8::padded_blocks(k)` blocks
// per row taken in pairs; the 32 code bytes of a pair hold input i of the first block in the low
// nibble of byte i and input i of the second block in the high nibble (a reordering of the
// checkpoint's pairs of neighbouring inputs), padding codes 0; then one fp32 scale per block,
// stored halved because the kernels read each code as twice its e2m1 value (an integer).
#include <cstdint>

#include "core/tensor.h"

namespace deepinfer::mxfp4 {

// e2m1 values (sign in bit 3).
inline constexpr float kE2m1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

int64_t row_bytes(int64_t k);

// Whether pack() keeps weights with these scales (fp32): positive powers of two 2^e with
// -125 <= e <= 125, so that every nonzero value is a normal number and decodes exactly in fp32
// and in bf16 (the kernels rely on it; other weights are widened at load).
bool packable(const Tensor& scales);
// From the checkpoint's packed codes [n, k/2] (U8/I8: even input in the low nibble) and their
// scales as fp32 [n, k/32] (packable).
Tensor pack(const Tensor& codes, const Tensor& scales, int64_t k);
// The values an MXFP4 tensor stands for, as fp32 [n, k].
Tensor dequantize(const Tensor& w);
// The k values of one packed row (row_bytes(k) bytes) into `out`.
void decode_row(const uint8_t* row, int64_t k, float* out);

}  // namespace deepinfer::mxfp4
