#pragma once
// Rows of the KV cache (rings, entry pools) in their element type: fp32, or bf16 where the model
// asked for it (Backend::reads_bf16_cache): stored rounded to nearest even, read back widened.
#include <cstdint>
#include <cstring>

#include "base/error.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace deepinfer::kernels::cpu {

// n values into `dst` (a tensor view: the cache is written through it) from element `at` on.
inline void store_row(const float* src, int64_t n, const Tensor& dst, int64_t at) {
    if (dst.dtype() == DType::kBF16) {
        uint16_t* out = dst.data<uint16_t>() + at;
        for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(src[i]);
        return;
    }
    DI_CHECK(dst.dtype() == DType::kF32, "cache rows of dtype {}", dtype_name(dst.dtype()));
    std::memcpy(dst.data<float>() + at, src, static_cast<size_t>(n) * sizeof(float));
}

// n values of `src` from element `at` on, as fp32.
inline void load_row(const Tensor& src, int64_t at, int64_t n, float* out) {
    if (src.dtype() == DType::kBF16) {
        const uint16_t* in = src.data<uint16_t>() + at;
        for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
        return;
    }
    DI_CHECK(src.dtype() == DType::kF32, "cache rows of dtype {}", dtype_name(src.dtype()));
    std::memcpy(out, src.data<float>() + at, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace deepinfer::kernels::cpu
