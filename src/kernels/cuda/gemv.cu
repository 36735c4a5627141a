// Matmuls of a few activation rows (decode) against bf16 weights: y = x · wᵀ with fp32 activations
// and fp32 accumulation, one launch, no bf16 split of the activations (so the product is as exact
// as the CPU's) and weights streamed with 16-byte loads. The work is cut into tasks of 4 weight
// rows. Products with fewer tasks than the GPU holds warps give each task a block, whose threads
// split k; the others give each task a warp, the warps striding over all tasks on a one-wave
// grid. One activation row's warp tasks take 2 rows with 8 strides in flight (Nsight Compute,
// V4-Flash's q_b + indexer q_b: 21.7 -> 20.9-21.1 µs; 2-row block tasks measured faster alone in a
// loop of launches but slower in the model's step, so blocks keep 4 rows). Dot products are
// added in a fixed order either way. One launch covers up to kMaxParts products of
// the same shape of x: the groups of a grouped matmul (wo_a) or sibling projections of one x.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

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
    int prefetch_tasks;  // tasks [0, prefetch_tasks) prefetch their weight rows into L2 before the PDL wait
    int64_t lda, k;
    bool accumulate;
};

__device__ const Part& part_of(const GemvArgs& a, int task) {
    int pi = 0;
    while (pi + 1 < a.num_parts && task >= a.parts[pi + 1].first_task) ++pi;
    return a.parts[pi];
}

// A task's R weight rows times the M rows of x over this thread's columns (first, first +
// stride, ...), Unroll strides of loads in flight; acc[r][t] gets row r's dot with x row t.
template <int M, int R, int Unroll>
__device__ __forceinline__ void task_dots(const GemvArgs& a, const Part& part, int64_t row0, int64_t first,
                                          int64_t stride, float (&acc)[R][M]) {
    const __nv_bfloat16* w[R];
    for (int r = 0; r < R; ++r) w[r] = part.w + min(row0 + r, part.rows - 1) * a.k;
#pragma unroll Unroll
    for (int64_t c = first; c < a.k; c += stride) {
        uint4 wv[R];
        for (int r = 0; r < R; ++r) wv[r] = load_weights(w[r] + c);
        for (int t = 0; t < M; ++t) {
            float4 lo = *reinterpret_cast<const float4*>(part.x + t * a.lda + c);
            float4 hi = *reinterpret_cast<const float4*>(part.x + t * a.lda + c + 4);
            for (int r = 0; r < R; ++r) acc[r][t] += dot8(wv[r], lo, hi);
        }
    }
}

// Before waiting for the preceding kernel, lanes 0..R-1 start the task's weight rows loading
// into L2 (the first tasks only: a bounded share of L2).
template <int R>
__device__ __forceinline__ void prefetch_task(const GemvArgs& a, const Part& part, int task, int64_t row0, int lane) {
    if (task < a.prefetch_tasks && lane < R && row0 + lane < part.rows)
        prefetch_l2(part.w + (row0 + lane) * a.k, static_cast<unsigned>(a.k * sizeof(__nv_bfloat16)));
}

// A task on a whole block: threads split k; warps' sums are added in warp order.
template <int M, int R>
__global__ void __launch_bounds__(kThreads) gemv_block_kernel(GemvArgs a) {
    pdl_launch_dependents();
    int task = blockIdx.x;
    const Part& part = part_of(a, task);
    int64_t row0 = static_cast<int64_t>(task - part.first_task) * R;
    prefetch_task<R>(a, part, task, row0, threadIdx.x);
    pdl_wait();
    float acc[R][M] = {};
    task_dots<M, R, 2>(a, part, row0, threadIdx.x * 8, kThreads * 8, acc);
    __shared__ float partial[kWarps][R * M];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < M; ++t) {
            float v = warp_sum(acc[r][t]);
            if (lane == 0) partial[warp][r * M + t] = v;
        }
    __syncthreads();
    if (threadIdx.x >= R * M) return;
    int r = threadIdx.x / M, t = threadIdx.x % M;
    if (row0 + r >= part.rows) return;
    float v = 0;
    for (int i = 0; i < kWarps; ++i) v += partial[i][threadIdx.x];
    float* out = part.y + t * part.ldy + row0 + r;
    *out = a.accumulate ? *out + v : v;
}

// A task on one warp: lanes split k, the sum by butterfly.
template <int M, int R, int Unroll>
__device__ void gemv_task(const GemvArgs& a, int task, int lane) {
    const Part& part = part_of(a, task);
    int64_t row0 = static_cast<int64_t>(task - part.first_task) * R;
    float acc[R][M] = {};
    task_dots<M, R, Unroll>(a, part, row0, lane * 8, 32 * 8, acc);
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < M; ++t) {
            float v = warp_sum(acc[r][t]);  // every lane holds the sum
            if (lane == r * M + t && row0 + r < part.rows) {
                float* out = part.y + t * part.ldy + row0 + r;
                *out = a.accumulate ? *out + v : v;
            }
        }
}

template <int M, int R, int Unroll>
__global__ void __launch_bounds__(kThreads) gemv_warp_kernel(GemvArgs a) {
    pdl_launch_dependents();
    int lane = threadIdx.x % 32;
    int first = blockIdx.x * kWarps + threadIdx.x / 32;
    if (first < a.tasks) {
        const Part& part = part_of(a, first);
        prefetch_task<R>(a, part, first, static_cast<int64_t>(first - part.first_task) * R, lane);
    }
    pdl_wait();
    for (int task = first; task < a.tasks; task += gridDim.x * kWarps)
        gemv_task<M, R, Unroll>(a, task, lane);
}

using Kernel = void (*)(GemvArgs);

// One row of x: its kernels by knob (CudaKernelConfig::gemv_one_row_*; the defaults are warp tasks
// of 2 rows with 8 strides in flight and block tasks of 4 rows): [rows 2|4][unroll 4|8], [rows 2|4].
constexpr Kernel kOneRowWarp[2][2] = {{gemv_warp_kernel<1, 2, 4>, gemv_warp_kernel<1, 2, 8>},
                                      {gemv_warp_kernel<1, 4, 4>, gemv_warp_kernel<1, 4, 8>}};
constexpr Kernel kOneRowBlock[2] = {gemv_block_kernel<1, 2>, gemv_block_kernel<1, 4>};
// 2 to 8 rows of x: tasks of 4 rows.
constexpr Kernel kWarpTasks[] = {gemv_warp_kernel<2, 4, 4>, gemv_warp_kernel<3, 4, 4>, gemv_warp_kernel<4, 4, 4>,
                                 gemv_warp_kernel<5, 4, 4>, gemv_warp_kernel<6, 4, 4>, gemv_warp_kernel<7, 4, 4>,
                                 gemv_warp_kernel<8, 4, 4>};
constexpr Kernel kBlockTasks[] = {gemv_block_kernel<2, 4>, gemv_block_kernel<3, 4>, gemv_block_kernel<4, 4>,
                                  gemv_block_kernel<5, 4>, gemv_block_kernel<6, 4>, gemv_block_kernel<7, 4>,
                                  gemv_block_kernel<8, 4>};

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Tasks of `rows` weight rows over the products (and each part's first task); the first tasks'
// rows, up to prefetch_bytes, are prefetched into L2 before the PDL wait.
int assign_tasks(GemvArgs& a, int rows, int64_t prefetch_bytes) {
    a.tasks = 0;
    for (int i = 0; i < a.num_parts; ++i) {
        a.parts[i].first_task = a.tasks;
        a.tasks += blocks_for(a.parts[i].rows, rows);
    }
    a.prefetch_tasks = static_cast<int>(std::min<int64_t>(a.tasks, prefetch_bytes / (rows * a.k * 2)));
    return a.tasks;
}

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
        a.parts[i] = {p.x, p.w->data<__nv_bfloat16>(), p.y, p.w->dim(0), p.ldy, 0};
    }
    const CudaKernelConfig& v = knobs();
    Kernel warp_kernel =
        m == 1 ? kOneRowWarp[v.gemv_one_row_warp_rows == 4][v.gemv_one_row_warp_unroll == 8] : kWarpTasks[m - 2];
    int wave = sm_count_ * std::max(resident_blocks(reinterpret_cast<const void*>(warp_kernel), kThreads), 1);
    int64_t prefetch = int64_t{v.gemv_prefetch_mib} << 20;
    if (assign_tasks(a, 4, prefetch) < wave * kWarps) {
        int block_rows = v.gemv_one_row_block_rows;
        if (m == 1 && block_rows != 4) assign_tasks(a, block_rows, prefetch);
        launch_pdl(m == 1 ? kOneRowBlock[block_rows == 4] : kBlockTasks[m - 2], a.tasks, kThreads, 0, stream_, a);
        return true;
    }
    if (m == 1) assign_tasks(a, v.gemv_one_row_warp_rows, prefetch);
    launch_pdl(warp_kernel, wave, kThreads, 0, stream_, a);
    return true;
}

}  // namespace deepinfer::kernels::cuda
