#include "kernels/cpu/gemm_bf16.h"

#include <algorithm>

#include "core/dtype.h"

namespace deepinfer::kernels::cpu {

int64_t bf16_activation_stride(int64_t k) { return (k + 31) / 32 * 32; }

void round_activations_bf16(const float* x, int64_t lda, int64_t k, int64_t begin, int64_t end, uint16_t* out) {
    if (cpu_has_avx512_bf16()) return round_activations_bf16_avx512(x, lda, k, begin, end, out);
    int64_t stride = bf16_activation_stride(k);
    for (int64_t r = begin; r < end; ++r) {
        uint16_t* o = out + r * stride;
        for (int64_t i = 0; i < k; ++i) o[i] = f32_to_bf16(x[r * lda + i]);
        std::fill(o + k, o + stride, uint16_t{0});
    }
}

void round_activations_bf16_as_f32(const float* x, int64_t lda, int64_t k, int64_t begin, int64_t end, float* out) {
    for (int64_t r = begin; r < end; ++r)
        for (int64_t i = 0; i < k; ++i) out[r * k + i] = bf16_to_f32(f32_to_bf16(x[r * lda + i]));
}

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
    }();
    return has;
#else
    return false;
#endif
}

}  // namespace deepinfer::kernels::cpu
