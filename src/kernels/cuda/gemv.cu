// Matmuls of a few activation rows (decode) against bf16 weights: y = x · wᵀ with fp32 activations
// and fp32 accumulation, one launch, no bf16 split of the activations (so the product is as exact
// as the CPU's) and weights streamed with 16-byte loads. Each block owns kRows weight rows; its
// threads split k (so short, wide matrices still spread over the GPU) and the partial dots are
// added warp by warp in a fixed order. Grouped matmuls (wo_a) run as one launch: weight row j
// belongs to group j / rows_per_group, which reads its own slice of x.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kRows = 4;  // weight rows per block
constexpr int kThreads = 256;

struct GemvArgs {
    const float* x;
    int64_t lda, x_group_step, rows_per_group;
    const __nv_bfloat16* w;
    int64_t n, k;
    float* y;
    int64_t ldy;
    bool accumulate;
};

template <int M>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvArgs a) {
    int64_t row0 = blockIdx.x * int64_t{kRows};
    const float* x = a.x + row0 / a.rows_per_group * a.x_group_step;
    const __nv_bfloat16* w[kRows];
    for (int r = 0; r < kRows; ++r) w[r] = a.w + min(row0 + r, a.n - 1) * a.k;
    float acc[kRows][M] = {};
#pragma unroll 2
    for (int64_t c = threadIdx.x * 8; c < a.k; c += kThreads * 8) {
        uint4 wv[kRows];
        for (int r = 0; r < kRows; ++r) wv[r] = load_weights(w[r] + c);
        for (int t = 0; t < M; ++t) {
            float4 lo = *reinterpret_cast<const float4*>(x + t * a.lda + c);
            float4 hi = *reinterpret_cast<const float4*>(x + t * a.lda + c + 4);
            for (int r = 0; r < kRows; ++r) acc[r][t] += dot8(wv[r], lo, hi);
        }
    }
    __shared__ float partial[kThreads / 32][kRows * M];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int r = 0; r < kRows; ++r)
        for (int t = 0; t < M; ++t) {
            float v = warp_sum(acc[r][t]);
            if (lane == 0) partial[warp][r * M + t] = v;
        }
    __syncthreads();
    if (threadIdx.x >= kRows * M) return;
    int r = threadIdx.x / M, t = threadIdx.x % M;
    if (row0 + r >= a.n) return;
    float v = 0;
    for (int i = 0; i < kThreads / 32; ++i) v += partial[i][threadIdx.x];
    float* out = a.y + t * a.ldy + row0 + r;
    *out = a.accumulate ? *out + v : v;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool CudaBackend::gemv(const float* x, int64_t lda, const Tensor& w, float* y, int64_t ldy, int64_t m, int groups,
                       bool accumulate) {
    int64_t n = w.dim(0), k = w.dim(-1);
    // One group: every row reads x from its start (a group as tall as the rounded-up matrix).
    int64_t rows_per_group = groups == 1 ? blocks_for(n, kRows) * int64_t{kRows} : n / groups;
    bool fits = w.dtype() == DType::kBF16 && m >= 1 && m <= kGemvMaxRows && k % 8 == 0 && lda % 4 == 0 &&
                aligned16(x) && aligned16(w.raw()) && rows_per_group % kRows == 0;
    if (!fits) return false;
    GemvArgs a{x, lda, k, rows_per_group, w.data<__nv_bfloat16>(), n, k, y, ldy, accumulate};
    int blocks = blocks_for(n, kRows);
    switch (m) {
        case 1: gemv_kernel<1><<<blocks, kThreads, 0, stream_>>>(a); break;
        case 2: gemv_kernel<2><<<blocks, kThreads, 0, stream_>>>(a); break;
        case 3: gemv_kernel<3><<<blocks, kThreads, 0, stream_>>>(a); break;
        case 4: gemv_kernel<4><<<blocks, kThreads, 0, stream_>>>(a); break;
        case 5: gemv_kernel<5><<<blocks, kThreads, 0, stream_>>>(a); break;
        case 6: gemv_kernel<6><<<blocks, kThreads, 0, stream_>>>(a); break;
        case 7: gemv_kernel<7><<<blocks, kThreads, 0, stream_>>>(a); break;
        default: gemv_kernel<8><<<blocks, kThreads, 0, stream_>>>(a); break;
    }
    return true;
}

}  // namespace deepinfer::kernels::cuda
