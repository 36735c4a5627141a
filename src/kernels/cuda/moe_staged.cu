// Grouped routed experts in the fast precision (one bf16 part per activation) with the weights
// streamed through shared memory: the tensor-core kernels of moe_grouped.cu load each warp's
// weight fragments straight from memory, a 64-byte run per row per step, which leaves the memory
// system short of requests at decode batch sizes. Here a block of 8 warps owns 128 weight rows of
// one expert (up: 64 rows of w1 and the same 64 of w3; down: 128 rows of w2) and copies k chunks
// of kChunk columns of them, with the chunk's activations of up to 8 T of the expert's pairs, into
// a ring of kStages shared-memory stages with cp.async (each row's chunk one coalesced 128-byte
// run), kStages - 1 chunks ahead of the products. A warp then takes its 16 rows of the stage as
// mma.m16n8k16 A fragments (ldmatrix) against the pairs' B fragments, fp32 accumulation. More
// than 8 T pairs: another pass over k. T (pair tiles per pass) is 8 or, with variant
// moe_staged_wide and steps averaging more than 64 pairs an expert (short prefills), 16: fewer
// passes, so fewer reads of the weights.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 16 * kWarps;    // weight rows per block
constexpr int kChunk = 64;            // k columns per stage: four k16 steps
constexpr int kStages = 3;
constexpr int kLd = kChunk + 8;       // bf16 row stride: ldmatrix's 8 rows fall in distinct banks
constexpr int kPieces = kChunk / 8;   // 16-byte copies per row and chunk
template <int T>
constexpr size_t kStageElems = static_cast<size_t>(kRows + 8 * T) * kLd;
template <int T>
constexpr size_t kSmemBytes = kStages * kStageElems<T> * sizeof(__nv_bfloat16);

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Where a pass reads: weight row r of the block (clamped to the matrix), activation row t of the
// pass (null past the pass's pairs: zeros), and the k extent.
struct PassRows {
    const __nv_bfloat16* w_first;   // up: w1 (the block's rows 0-63); down: w2
    const __nv_bfloat16* w_second;  // up: w3 (rows 64-127); down: w2 again
    int w_rows, row0, half;     // rows of the matrix, the block's first row, rows per matrix in the block
    const __nv_bfloat16* act;
    const int* order;
    int p0, count, row_div, k;  // activation row of pair order[p0 + t] is order[...] / row_div
    __device__ const __nv_bfloat16* weight_row(int r) const {
        return (r < half ? w_first : w_second) + static_cast<int64_t>(min(row0 + r % half, w_rows - 1)) * k;
    }
    __device__ const __nv_bfloat16* act_row(int t) const {
        return act + static_cast<int64_t>(order[p0 + min(t, count - 1)] / row_div) * k;
    }
};

// Chunk c of the block's rows and the pass's activation rows (tiles * 8 of them) into `stage`.
__device__ void load_chunk(const PassRows& pr, int c, int tiles, __nv_bfloat16* stage) {
    int k0 = c * kChunk;
    for (int i = threadIdx.x; i < (kRows + 8 * tiles) * kPieces; i += kThreads) {
        int r = i / kPieces, piece = i % kPieces, col = k0 + 8 * piece;
        bool weight = r < kRows;
        const __nv_bfloat16* src = weight ? pr.weight_row(r) : pr.act_row(r - kRows);
        bool valid = col < pr.k && (weight || r - kRows < pr.count);
        cp_async16(stage + r * kLd + 8 * piece, src + (valid ? col : 0), valid);
    }
}

// acc[j] (the warp's 16 rows x pairs 8j..8j+7) += the pass's products over all of k.
template <int T>
__device__ void stream_products(const PassRows& pr, int tiles, __nv_bfloat16* smem, float (&acc)[T][4]) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int chunks = (pr.k + kChunk - 1) / kChunk;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < chunks) load_chunk(pr, s, tiles, smem + s * kStageElems<T>);
        cp_async_commit();  // empty groups keep the count uniform
    }
    for (int c = 0; c < chunks; ++c) {
        cp_async_wait<kStages - 2>();
        __syncthreads();  // chunk c has landed for every thread; chunk c - 1's stage is free
        if (c + kStages - 1 < chunks)
            load_chunk(pr, c + kStages - 1, tiles, smem + ((c + kStages - 1) % kStages) * kStageElems<T>);
        cp_async_commit();
        const __nv_bfloat16* w = smem + (c % kStages) * kStageElems<T>;
        const __nv_bfloat16* x = w + kRows * kLd;
#pragma unroll
        for (int ks = 0; ks < kChunk / 16; ++ks) {
            uint32_t a[4];
            ldmatrix_x4(a, w + (16 * warp + lane % 16) * kLd + 16 * ks + 8 * (lane / 16));
#pragma unroll
            for (int j = 0; j < T; j += 2) {  // (tile j, k 0-7), (j, 8-15), (j + 1, 0-7), (j + 1, 8-15)
                if (j >= tiles) break;
                uint32_t b[4];
                ldmatrix_x4(b, x + (8 * (j + lane / 16) + lane % 8) * kLd + 16 * ks + 8 * ((lane / 8) % 2));
                mma_bf16(acc[j], a[0], a[1], a[2], a[3], b[0], b[1]);
                mma_bf16(acc[j + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // the stages may be reused
}

// h[pair] = silu(min(w1 · x, limit)) * clamp(w3 · x, ±limit) as bf16, for the block's 64 rows.
template <int T>
__global__ void __launch_bounds__(kThreads) moe_up_staged_kernel(const __nv_bfloat16* xb, int d, const int* order,
                                                                 const int* offsets, const ExpertRows* ex, int top_k,
                                                                 int inter, float limit, __nv_bfloat16* hb) {
    pdl_prologue();
    extern __shared__ float4 smem4[];
    auto* smem = reinterpret_cast<__nv_bfloat16*>(smem4);
    int e = blockIdx.x, begin = offsets[e], end = offsets[e + 1], r0 = blockIdx.y * (kRows / 2);
    if (begin == end) return;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    auto* gu = reinterpret_cast<float (*)[kRows / 2][8 * T + 1]>(smem4);  // after the products: [2][64][8 T + 1]
    for (int p0 = begin; p0 < end; p0 += 8 * T) {
        int count = min(8 * T, end - p0), tiles = (count + 7) / 8;
        tiles += tiles % 2;  // tiles go in pairs
        PassRows pr{ex[e].w1, ex[e].w3, inter, r0, kRows / 2, xb, order, p0, count, top_k, d};
        float acc[T][4] = {};
        stream_products<T>(pr, tiles, smem, acc);
        int which = warp / 4, wr = (warp % 4) * 16;
#pragma unroll
        for (int j = 0; j < T; ++j)  // constant indices keep acc in registers
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (j < tiles) gu[which][wr + g + 8 * (i / 2)][8 * j + 2 * t + i % 2] = acc[j][i];
        __syncthreads();
        for (int i = threadIdx.x; i < (kRows / 2) * count; i += kThreads) {
            int r = i % (kRows / 2), pt = i / (kRows / 2);
            if (r0 + r >= inter) continue;
            float gv = fminf(gu[0][r][pt], limit), uv = fminf(fmaxf(gu[1][r][pt], -limit), limit);
            hb[static_cast<int64_t>(order[p0 + pt]) * inter + r0 + r] = __float2bfloat16(gv / (1.0f + expf(-gv)) * uv);
        }
        __syncthreads();  // gu is read before the next pass's stages overwrite it
    }
}

// y[pair, r] = weight[pair] * w2_r · h[pair] for the block's 128 rows.
template <int T>
__global__ void __launch_bounds__(kThreads) moe_down_staged_kernel(const __nv_bfloat16* hb, const int* order,
                                                                   const int* offsets, const ExpertRows* ex,
                                                                   const float* weights, int d, int inter, float* y) {
    pdl_prologue();
    extern __shared__ float4 smem4[];
    auto* smem = reinterpret_cast<__nv_bfloat16*>(smem4);
    int e = blockIdx.x, begin = offsets[e], end = offsets[e + 1], r0 = blockIdx.y * kRows;
    if (begin == end) return;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    for (int p0 = begin; p0 < end; p0 += 8 * T) {
        int count = min(8 * T, end - p0), tiles = (count + 7) / 8;
        tiles += tiles % 2;
        PassRows pr{ex[e].w2, ex[e].w2, d, r0, kRows, hb, order, p0, count, 1, inter};
        float acc[T][4] = {};
        stream_products<T>(pr, tiles, smem, acc);
#pragma unroll
        for (int j = 0; j < T; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                int pt = 8 * j + 2 * t + i % 2, r = r0 + 16 * warp + g + 8 * (i / 2);
                if (j >= tiles || pt >= count || r >= d) continue;
                int pair = order[p0 + pt];
                y[static_cast<int64_t>(pair) * d + r] = weights[pair] * acc[j][i];
            }
    }
}

// smem_set: whether this backend (its device) has allowed the kernels their shared memory yet.
template <int T>
void launch_staged(bool& smem_set, cudaStream_t stream, const __nv_bfloat16* xb, int d, const int* order, const int* offsets,
                   const ExpertRows* rows, int experts, int top_k, int inter, float limit, __nv_bfloat16* hb,
                   const float* weights, float* y) {
    if (!smem_set) {
        int bytes = static_cast<int>(kSmemBytes<T>);
        DI_CUDA_CHECK(cudaFuncSetAttribute(moe_up_staged_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        DI_CUDA_CHECK(cudaFuncSetAttribute(moe_down_staged_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        smem_set = true;
    }
    launch_pdl(moe_up_staged_kernel<T>, dim3(experts, blocks_for(inter, kRows / 2)), kThreads, kSmemBytes<T>, stream, xb, d,
               order, offsets, rows, top_k, inter, limit, hb);
    launch_pdl(moe_down_staged_kernel<T>, dim3(experts, blocks_for(d, kRows)), kThreads, kSmemBytes<T>, stream, hb, order,
               offsets, rows, weights, d, inter, y);
}

}  // namespace

void MoeFamily::launch_moe_staged(const __nv_bfloat16* xb, int d, const int* order, const int* offsets,
                                  const ExpertRows* rows, int experts, int pairs, int top_k, int inter, float limit,
                                  __nv_bfloat16* hb, const float* weights, float* y) {
    bool wide = dev_.knobs().moe_staged_wide && pairs > 64 * experts;
    auto launch = wide ? launch_staged<16> : launch_staged<8>;
    launch(staged_smem_set_[wide], dev_.stream(), xb, d, order, offsets, rows, experts, top_k, inter, limit, hb, weights, y);
}

}  // namespace deepinfer::kernels::cuda
