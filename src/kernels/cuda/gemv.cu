// Matmuls of a few activation rows (decode) against bf16 weights: y = x · wᵀ with fp32 activations
// and fp32 accumulation, one launch, no bf16 split of the activations (so the product is as exact
// as the CPU's) and weights streamed with 16-byte loads. A warp owns kRows weight rows at a time
// (a task); its lanes split k and keep kRows x (unrolled) loads in flight, the dot products are
// added by a fixed butterfly, and the warps stride over all tasks (a grid of a few waves, so
// block start-up is paid a few times per SM, not once per four rows). One launch covers up to
// kMaxParts products of the same shape of x: the groups of a grouped matmul (wo_a) or sibling
// projections of one x.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kRows = 4;  // weight rows per warp task
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxParts = 8;

struct Part {
    const float* x;
    const __nv_bfloat16* w;
    float* y;
    int64_t rows, ldy;
    int first_task;
};

struct GemvArgs {
    Part parts[kMaxParts];
    int num_parts, tasks;
    int64_t lda, k;
    bool accumulate;
};

template <int M>
__device__ void gemv_task(const GemvArgs& a, int task, int lane) {
    int pi = 0;
    while (pi + 1 < a.num_parts && task >= a.parts[pi + 1].first_task) ++pi;
    const Part& part = a.parts[pi];
    int64_t row0 = static_cast<int64_t>(task - part.first_task) * kRows;
    const __nv_bfloat16* w[kRows];
    for (int r = 0; r < kRows; ++r) w[r] = part.w + min(row0 + r, part.rows - 1) * a.k;
    float acc[kRows][M] = {};
#pragma unroll 4
    for (int64_t c = lane * 8; c < a.k; c += 32 * 8) {
        uint4 wv[kRows];
        for (int r = 0; r < kRows; ++r) wv[r] = load_weights(w[r] + c);
        for (int t = 0; t < M; ++t) {
            float4 lo = *reinterpret_cast<const float4*>(part.x + t * a.lda + c);
            float4 hi = *reinterpret_cast<const float4*>(part.x + t * a.lda + c + 4);
            for (int r = 0; r < kRows; ++r) acc[r][t] += dot8(wv[r], lo, hi);
        }
    }
    for (int r = 0; r < kRows; ++r)
        for (int t = 0; t < M; ++t) {
            float v = warp_sum(acc[r][t]);  // every lane holds the sum
            if (lane == r * M + t && row0 + r < part.rows) {
                float* out = part.y + t * part.ldy + row0 + r;
                *out = a.accumulate ? *out + v : v;
            }
        }
}

template <int M>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvArgs a) {
    pdl_prologue();
    int lane = threadIdx.x % 32;
    for (int task = blockIdx.x * kWarps + threadIdx.x / 32; task < a.tasks; task += gridDim.x * kWarps)
        gemv_task<M>(a, task, lane);
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
    for (size_t i = 0; i < products.size(); ++i) {
        const GemvProduct& p = products[i];
        if (p.w->dtype() != DType::kBF16 || p.w->dim(-1) != a.k || a.k % 8 != 0 || !aligned16(p.x) || !aligned16(p.w->raw()))
            return false;
        a.parts[i] = {p.x, p.w->data<__nv_bfloat16>(), p.y, p.w->dim(0), p.ldy, a.tasks};
        a.tasks += blocks_for(p.w->dim(0), kRows);
    }
    static constexpr void (*kByRows[])(GemvArgs) = {gemv_kernel<1>, gemv_kernel<2>, gemv_kernel<3>, gemv_kernel<4>,
                                                      gemv_kernel<5>, gemv_kernel<6>, gemv_kernel<7>, gemv_kernel<8>};
    auto kernel = kByRows[m - 1];
    int& resident = gemv_blocks_per_sm_[m - 1];  // one wave of the grid: as many blocks as fit at once
    if (resident == 0) DI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, kThreads, 0));
    int blocks = std::min(blocks_for(a.tasks, kWarps), sm_count_ * std::max(resident, 1));
    launch_pdl(kernel, blocks, kThreads, 0, stream_, a);
    return true;
}

}  // namespace deepinfer::kernels::cuda
