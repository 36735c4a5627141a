// FP8 block-scaled weights as the checkpoint stores them (DType::kFp8, core/quant_fp8.h: a row's
// k e4m3 codes, then one E8M0 scale byte per 32 inputs). Steps of up to kGemvMaxRows rows read
// the codes directly (a warp per weight row: a quarter of the bytes bf16 weights would take);
// longer steps widen the matrix to bf16 in scratch for the tensor-core GEMMs. Every packed value
// times its scale is a normal number, so both decode exactly: the widened matrix is the one a
// load-time widening gives, bit for bit.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "core/quant_fp8.h"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarps = 8;

__device__ __forceinline__ float e4m3_value(unsigned code, unsigned scale_byte) {
    __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
    return __half2float(__half(h)) * __int_as_float(static_cast<int>(scale_byte) << 23);  // 2^(e - 127)
}

// y[r, j] (+)= Σ_c x[r, c] · w[j, c] for r < m <= M: warp j reads row j's codes four at a time.
template <int M>
__global__ void __launch_bounds__(kWarps * 32) fp8_gemv_kernel(const uint8_t* w, int64_t n, int64_t k, int64_t row_bytes,
                                                              const float* x, int64_t lda, int m, float* y, int64_t ldy,
                                                              bool accumulate) {
    pdl_launch_dependents();
    int lane = threadIdx.x % 32;
    int64_t row = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
    pdl_wait();
    if (row >= n) return;
    const uint8_t* codes = w + row * row_bytes;
    const uint8_t* scales = codes + k;
    float acc[M] = {};
    for (int64_t c = 4 * lane; c < k; c += 128) {
        uint32_t four = *reinterpret_cast<const uint32_t*>(codes + c);  // c % 4 == 0; rows start 4-aligned (k % 128 == 0)
        unsigned scale = scales[c / fp8::kScaleColumns];
        float v[4];
        for (int i = 0; i < 4; ++i) v[i] = e4m3_value((four >> (8 * i)) & 0xFF, scale);
        for (int r = 0; r < M; ++r) {
            if (r >= m) break;
            float4 xv = *reinterpret_cast<const float4*>(x + r * lda + c);
            acc[r] += xv.x * v[0] + xv.y * v[1] + xv.z * v[2] + xv.w * v[3];
        }
    }
    for (int r = 0; r < M && r < m; ++r) {
        float s = acc[r];
        for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) y[r * ldy + row] = accumulate ? y[r * ldy + row] + s : s;
    }
}

__global__ void fp8_widen_kernel(const uint8_t* w, int64_t n, int64_t k, int64_t row_bytes, __nv_bfloat16* out) {
    pdl_prologue();
    int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
    if (i >= n * k) return;
    int64_t r = i / k, c = i % k;
    const uint8_t* row = w + r * row_bytes;
    out[i] = __float2bfloat16_rn(e4m3_value(row[c], row[k + c / fp8::kScaleColumns]));  // exact: a bf16 value
}

}  // namespace

bool CudaBackend::fp8_gemv(const float* x, int64_t lda, const Tensor& w, float* y, int64_t ldy, int64_t m, bool accumulate) {
    int64_t n = w.dim(0), k = w.dim(-1);
    if (m < 1 || m > kGemvMaxRows || k % 128 != 0 || lda % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
        reinterpret_cast<uintptr_t>(w.raw()) % 4 != 0)
        return false;
    const auto* codes = static_cast<const uint8_t*>(w.raw());
    launch_pdl(fp8_gemv_kernel<kGemvMaxRows>, blocks_for(n, kWarps), kWarps * 32, 0, stream_, codes, n, k, fp8::row_bytes(k),
               x, lda, static_cast<int>(m), y, ldy, accumulate);
    return true;
}

Tensor CudaBackend::widen_fp8(const Tensor& w) {
    int64_t n = w.dim(0), k = w.dim(-1);
    Tensor out = empty(DType::kBF16, {n, k});
    if (n * k > 0)
        launch_pdl(fp8_widen_kernel, blocks_for(n * k, 256), 256, 0, stream_, static_cast<const uint8_t*>(w.raw()), n, k,
                   fp8::row_bytes(k), out.data<__nv_bfloat16>());
    return out;
}

}  // namespace deepinfer::kernels::cuda
