// Matmuls of a few activation rows (decode) against bf16 weights: y = x · wᵀ with fp32 activations
// and fp32 accumulation, one launch, no bf16 split of the activations (so the product is as exact
// as the CPU's) and weights streamed with 16-byte loads. Each block owns kRows weight rows; its
// threads split k (so short, wide matrices still spread over the GPU) and the partial dots are
// added warp by warp in a fixed order. One launch covers up to kMaxParts products of the same
// shape of x: the groups of a grouped matmul (wo_a) or sibling projections of one x.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kRows = 4;  // weight rows per block
constexpr int kThreads = 256;
constexpr int kMaxParts = 8;

struct Part {
    const float* x;
    const __nv_bfloat16* w;
    float* y;
    int64_t rows, ldy;
    int first_block;
};

struct GemvArgs {
    Part parts[kMaxParts];
    int num_parts;
    int64_t lda, k;
    bool accumulate;
};

template <int M>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvArgs a) {
    pdl_prologue();
    int pi = 0;
    while (pi + 1 < a.num_parts && static_cast<int>(blockIdx.x) >= a.parts[pi + 1].first_block) ++pi;
    const Part& part = a.parts[pi];
    int64_t row0 = (blockIdx.x - part.first_block) * int64_t{kRows};
    const __nv_bfloat16* w[kRows];
    for (int r = 0; r < kRows; ++r) w[r] = part.w + min(row0 + r, part.rows - 1) * a.k;
    float acc[kRows][M] = {};
#pragma unroll 2
    for (int64_t c = threadIdx.x * 8; c < a.k; c += kThreads * 8) {
        uint4 wv[kRows];
        for (int r = 0; r < kRows; ++r) wv[r] = load_weights(w[r] + c);
        for (int t = 0; t < M; ++t) {
            float4 lo = *reinterpret_cast<const float4*>(part.x + t * a.lda + c);
            float4 hi = *reinterpret_cast<const float4*>(part.x + t * a.lda + c + 4);
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
    if (row0 + r >= part.rows) return;
    float v = 0;
    for (int i = 0; i < kThreads / 32; ++i) v += partial[i][threadIdx.x];
    float* out = part.y + t * part.ldy + row0 + r;
    *out = a.accumulate ? *out + v : v;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool CudaBackend::gemv(std::span<const GemvProduct> products, int64_t lda, int64_t m, bool accumulate) {
    if (products.empty() || products.size() > kMaxParts || m < 1 || m > kGemvMaxRows || lda % 4 != 0) return false;
    GemvArgs a{};
    a.num_parts = static_cast<int>(products.size());
    a.lda = lda;
    a.k = products[0].w->dim(-1);
    a.accumulate = accumulate;
    int blocks = 0;
    for (size_t i = 0; i < products.size(); ++i) {
        const GemvProduct& p = products[i];
        if (p.w->dtype() != DType::kBF16 || p.w->dim(-1) != a.k || a.k % 8 != 0 || !aligned16(p.x) || !aligned16(p.w->raw()))
            return false;
        a.parts[i] = {p.x, p.w->data<__nv_bfloat16>(), p.y, p.w->dim(0), p.ldy, blocks};
        blocks += blocks_for(p.w->dim(0), kRows);
    }
    static constexpr void (*kByRows[])(GemvArgs) = {gemv_kernel<1>, gemv_kernel<2>, gemv_kernel<3>, gemv_kernel<4>,
                                                      gemv_kernel<5>, gemv_kernel<6>, gemv_kernel<7>, gemv_kernel<8>};
    launch_pdl(kByRows[m - 1], blocks, kThreads, 0, stream_, a);
    return true;
}

}  // namespace deepinfer::kernels::cuda
