#pragma once
// Dense matrix products on the CPU: y[m, n] (+)= x[m, k] · w[n, k]ᵀ with fp32 activations (or
// rounded to bf16: gemm_bf16.h), bf16, fp32, Q8 (core/quant_q8.h; gemm_q8.h), MXFP4 or FP8 weights and fp32
// accumulation. Three variants (scalar, AVX2, AVX-512) share one contract; the caller picks by
// Isa, so tests can run every variant the machine supports.
#include <cstdint>
#include <span>
#include <vector>

#include "base/cpu_features.h"
#include "core/dtype.h"

namespace deepinfer {
class ThreadPool;
}

namespace deepinfer::kernels::cpu {

struct GemmArgs {
    const float* x = nullptr;  // [m, k], row stride lda
    int64_t lda = 0;
    // [n, k] row-major, row stride ldw, dtype w_dtype (kBF16, kF32, or kQ8 / kMxfp4 / kFp8 whose
    // rows are q8::row_bytes(k) / mxfp4::row_bytes(k) / fp8::row_bytes(k) apart whatever ldw says;
    // MXFP4 and FP8 need k % 32 == 0)
    const void* w = nullptr;
    int64_t ldw = 0;
    DType w_dtype = DType::kBF16;
    float* y = nullptr;  // [m, n], row stride ldy
    int64_t ldy = 0;
    int64_t m = 0, n = 0, k = 0;
    bool accumulate = false;  // y += instead of y =
    // Activations rounded to bf16 first (MatmulPrecision::kBf16; gemm_bf16.h); not for Q8 weights.
    bool bf16_activations = false;
    // MXFP4 weights: activations quantized to 8-bit blocks (the Q8 kernels, WeightQuant::kQ8)
    // instead of the weights decoded for fp32 (or bf16) activations. Q8 weights always are.
    bool q8_activations = false;
};

// Computes rows [n_begin, n_end) of w for all m rows of x, on the calling thread.
void gemm_rows(Isa isa, const GemmArgs& args, int64_t n_begin, int64_t n_end);
// The whole product, spread over the pool. Q8 and MXFP4 weights quantize x into `scratch` first,
// bf16 activations are rounded there (a temporary buffer when null).
void gemm(ThreadPool& pool, Isa isa, const GemmArgs& args, std::vector<uint8_t>* scratch = nullptr);
// Independent products in one pool dispatch (the experts of a MoE layer): their weight rows are
// laid end to end and split over the threads; every row is computed as gemm() computes it.
void gemm_batch(ThreadPool& pool, Isa isa, std::span<const GemmArgs> products, std::vector<uint8_t>* scratch = nullptr);

// Per-ISA entry points behind gemm_rows.
void gemm_rows_scalar(const GemmArgs& args, int64_t n_begin, int64_t n_end);
void gemm_rows_avx2(const GemmArgs& args, int64_t n_begin, int64_t n_end);
void gemm_rows_avx512(const GemmArgs& args, int64_t n_begin, int64_t n_end);

}  // namespace deepinfer::kernels::cpu
