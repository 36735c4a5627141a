#pragma once
// The fast precision's products (MatmulPrecision::kBf16): fp32 activations rounded to bf16
// (nearest even) once per product, then bf16 x bf16 dot products of bf16 weights with fp32
// accumulation. With AVX-512 BF16 one vdpbf16ps multiplies 32 pairs per instruction (twice the
// fp32 FMA rate, no widening of the weights); elsewhere the rounded activations go back to fp32
// and through the ordinary kernels, which gives the same products up to summation order.
#include <cstdint>

#include "kernels/cpu/gemm.h"

namespace deepinfer::kernels::cpu {

struct Bf16Activations {
    int64_t k = 0, stride = 0;  // stride: elements from one row to the next (k rounded up to 32, zero-filled)
    const uint16_t* data = nullptr;

    const uint16_t* row(int64_t r) const { return data + r * stride; }
    Bf16Activations from_row(int64_t r) const { return {k, stride, data + r * stride}; }
};

// Elements of one rounded activation row.
int64_t bf16_activation_stride(int64_t k);
// Rounds rows [begin, end) of x[m, k] (row stride lda) into `out` (bf16_activation_stride(k) per row).
void round_activations_bf16(const float* x, int64_t lda, int64_t k, int64_t begin, int64_t end, uint16_t* out);
// The same rounding, kept as fp32 values (row stride k): for CPUs without AVX-512 BF16.
void round_activations_bf16_as_f32(const float* x, int64_t lda, int64_t k, int64_t begin, int64_t end, float* out);

// Rows [n_begin, n_end) of the bf16 or MXFP4 weight `args.w` against the rounded activations
// (AVX-512 BF16; args.x is not read).
void gemm_bf16_rows_avx512(const GemmArgs& args, const Bf16Activations& xb, int64_t n_begin, int64_t n_end);
void round_activations_bf16_avx512(const float* x, int64_t lda, int64_t k, int64_t begin, int64_t end, uint16_t* out);

bool cpu_has_avx512_bf16();

}  // namespace deepinfer::kernels::cpu
