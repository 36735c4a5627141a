#pragma once
// Q8 weights (core/quant_q8.h) times fp32 activations: the activations are quantized the same way
// (blocks of 32, one scale each) once per product, each block's integer dot product is exact, and
// the block results are scaled and summed in fp32. The layout of the quantized activations:
// per row, `blocks * 32` signed codes, `blocks` scales, then for each 64-code chunk the 16 int32
// lane corrections the VNNI kernel starts from (-128 times the sum of the lane's 4 codes, undoing
// the weights' +128 code offset) and the 16 lane scales (each block's scale over its 8 lanes).
#include <cstdint>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace deepinfer::kernels::cpu {

struct Q8Activations {
    int64_t k = 0, blocks = 0, stride = 0;  // stride: bytes from one row to the next
    const uint8_t* data = nullptr;

    const int8_t* codes(int64_t row) const { return reinterpret_cast<const int8_t*>(data + row * stride); }
    const float* scales(int64_t row) const { return reinterpret_cast<const float*>(data + row * stride + blocks * 32); }
    const int32_t* lane_corrections(int64_t row) const {
        return reinterpret_cast<const int32_t*>(data + row * stride + blocks * 36);
    }
    const float* lane_scales(int64_t row) const {
        return reinterpret_cast<const float*>(data + row * stride + blocks * 36 + blocks * 32);
    }
    Q8Activations from_row(int64_t row) const { return {k, blocks, stride, data + row * stride}; }
};

// Bytes of one quantized activation row.
int64_t q8_activation_stride(int64_t k);
// Quantizes rows [begin, end) of x[m, k] (row stride lda) into `out` (q8_activation_stride(k) per row).
void quantize_activations(const float* x, int64_t lda, int64_t k, int64_t begin, int64_t end, uint8_t* out);

// Rows [n_begin, n_end) of the Q8 weight `args.w` against the quantized activations.
void gemm_q8_rows(Isa isa, const GemmArgs& args, const Q8Activations& xq, int64_t n_begin, int64_t n_end);
void gemm_q8_rows_scalar(const GemmArgs& args, const Q8Activations& xq, int64_t n_begin, int64_t n_end);
void gemm_q8_rows_vnni(const GemmArgs& args, const Q8Activations& xq, int64_t n_begin, int64_t n_end);

// The VNNI kernel needs AVX-512 VNNI besides Isa::kAvx512.
bool cpu_has_avx512_vnni();

}  // namespace deepinfer::kernels::cpu
