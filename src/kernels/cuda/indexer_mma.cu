// The lightning indexer's scores in the fast precision, on tensor cores: score(e) =
// Σ_h w_h · scale · relu(q_h · k_e) for every entry a token sees. One block per token; its queries
// (heads x dim, the M and K of mma.m16n8k16) are rounded to bf16 once and kept in registers as A
// fragments; tiles of kTileEntries entries are staged as bf16 rows in shared memory (the N side).
// Warp w takes head tile w % 4 and entries 32 (w / 4) .. + 31 of the tile: relu, the heads'
// weights and the sum over its 16 heads happen on the accumulators; the head tiles' sums meet in
// shared memory. The top-k that follows is compressor.cu's.
#include "kernels/cuda/indexer_common.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using indexer::IndexParams;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeads = 64;      // four head tiles, one per warp of each half
constexpr int kMaxDim = 128;       // eight k steps of A fragments in registers
constexpr int kTileEntries = 64;   // two halves of 32 entries
constexpr int kRowPad = 8;         // bf16 rows dim + 8 long: ldmatrix's 8 rows fall in distinct banks

__global__ void __launch_bounds__(kThreads) index_scores_mma_kernel(IndexParams p) {
    pdl_prologue();
    extern __shared__ float4 smem4[];
    int ld = p.dim + kRowPad, tiles_m = p.heads / 16, ksteps = p.dim / 16;
    __nv_bfloat16* q = reinterpret_cast<__nv_bfloat16*>(smem4);  // [heads][ld]
    __nv_bfloat16* keys = q + p.heads * ld;                       // [kTileEntries][ld]
    float* head_sums = reinterpret_cast<float*>(keys + kTileEntries * ld);  // [4][kTileEntries]
    int row = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    int mt = warp % 4, half = warp / 4;
    DeviceSeq s{};
    long long visible = 0;
    indexer::token_info(p, row, s, visible);
    const float* q_row = p.q + static_cast<long long>(row) * p.heads * p.dim;
    for (int i = 4 * threadIdx.x; i < p.heads * p.dim; i += 4 * kThreads)
        store_bf16x4(q + (i / p.dim) * ld + i % p.dim, *reinterpret_cast<const float4*>(q_row + i));
    __syncthreads();
    uint32_t a[kMaxDim / 16][4];
#pragma unroll
    for (int ks = 0; ks < kMaxDim / 16; ++ks)
        if (ks < ksteps && mt < tiles_m) ldmatrix_x4(a[ks], q + (16 * mt + lane % 16) * ld + 16 * ks + 8 * (lane / 16));
    const float* w = p.weights + static_cast<long long>(row) * p.heads;
    float w_lo = mt < tiles_m ? w[16 * mt + g] * p.scale : 0.0f;
    float w_hi = mt < tiles_m ? w[16 * mt + g + 8] * p.scale : 0.0f;
    const int* table = p.tables + s.table_offset;
    for (long long e0 = 0; e0 < visible; e0 += kTileEntries) {
        __syncthreads();  // the previous tile's keys and sums are used up
        for (int k = warp; k < kTileEntries; k += kWarps) {  // a lane per 4 columns (dim <= 128); zeros past the end
            long long e = e0 + k;
            float4 v{0, 0, 0, 0};
            if (e < visible && 4 * lane < p.dim)
                v = *reinterpret_cast<const float4*>(paged_row(p.pool, table, p.block, e, p.dim) + 4 * lane);
            if (4 * lane < p.dim) store_bf16x4(keys + k * ld + 4 * lane, v);
        }
        __syncthreads();
        if (mt < tiles_m) {
            float acc[4][4] = {};
#pragma unroll
            for (int ks = 0; ks < kMaxDim / 16; ++ks) {
                if (ks >= ksteps) break;
#pragma unroll
                for (int j = 0; j < 4; j += 2) {  // (tile j, k 0-7), (j, 8-15), (j + 1, 0-7), (j + 1, 8-15)
                    uint32_t b[4];
                    ldmatrix_x4(b, keys + (32 * half + 8 * (j + lane / 16) + lane % 8) * ld + 16 * ks + 8 * ((lane / 8) % 2));
                    mma_bf16(acc[j], a[ks][0], a[ks][1], a[ks][2], a[ks][3], b[0], b[1]);
                    mma_bf16(acc[j + 1], a[ks][0], a[ks][1], a[ks][2], a[ks][3], b[2], b[3]);
                }
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                // Rows g and g + 8 of the lane, columns 2t and 2t + 1; then the sum over the 8 g's.
                float c0 = w_lo * fmaxf(acc[j][0], 0.0f) + w_hi * fmaxf(acc[j][2], 0.0f);
                float c1 = w_lo * fmaxf(acc[j][1], 0.0f) + w_hi * fmaxf(acc[j][3], 0.0f);
#pragma unroll
                for (int m = 4; m < 32; m *= 2) {
                    c0 += __shfl_xor_sync(0xffffffffu, c0, m);
                    c1 += __shfl_xor_sync(0xffffffffu, c1, m);
                }
                if (g == 0) {
                    int col = 32 * half + 8 * j + 2 * t;
                    head_sums[mt * kTileEntries + col] = c0, head_sums[mt * kTileEntries + col + 1] = c1;
                }
            }
        }
        __syncthreads();
        if (threadIdx.x < kTileEntries && e0 + threadIdx.x < visible) {
            float score = 0;
            for (int m = 0; m < tiles_m; ++m) score += head_sums[m * kTileEntries + threadIdx.x];
            p.scores[static_cast<long long>(row) * p.max_visible + e0 + threadIdx.x] = score;
        }
    }
}

}  // namespace

bool CudaBackend::launch_index_scores_mma(const IndexParams& p, int tokens) {
    if (!knobs().indexer_mma || gemm_parts() != 1 || invariant() || p.heads % 16 != 0 || p.heads > kMaxHeads ||
        p.dim % 16 != 0 || p.dim > kMaxDim)
        return false;
    size_t smem = sizeof(__nv_bfloat16) * (p.heads + kTileEntries) * (p.dim + kRowPad) + sizeof(float) * 4 * kTileEntries;
    launch_pdl(index_scores_mma_kernel, tokens, kThreads, smem, stream(), p);  // <= 35 KB: no opt-in needed
    return true;
}

}  // namespace deepinfer::kernels::cuda
