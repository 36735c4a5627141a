// Attention of steps with many query tokens in the fast precision, on tensor cores. As in
// attention_tiled.cu a block takes one token and a group of kGroup heads, and a tile of
// kTileKeys keys is staged in shared memory once for the whole group; here queries and keys are
// rounded to bf16 where they are staged, and both products run as mma.m16n8k16 with fp32
// accumulation (the heads are the M dimension: every head of a token reads the same keys):
//   scores:  warp w takes head tile w % 2 and a quarter of head_dim (w / 2) against the tile's
//            32 keys; the four quarters' partial sums meet in shared memory;
//   softmax: warp w keeps the running (max, sum) of heads 4w..4w+3 (lane = key), and writes the
//            tile's weights rounded to bf16 (the sum adds the rounded weights, so the
//            normalisation matches what is multiplied);
//   values:  warp w takes head tile w / 4 and a quarter of head_dim (w % 4) of the output, the
//            weights as A and the staged keys, transposed by ldmatrix, as B.
// The sink joins at the end, as in the other kernels.
#include "kernels/cuda/attention_common.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using attn::AttnParams;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kGroup = 32;          // heads per block: two m16 tiles
constexpr int kTileKeys = 32;       // keys per tile: four n8 tiles of scores
constexpr int kMaxDim = 512;        // values: a warp's quarter of head_dim is at most 16 n8 tiles
constexpr int kRowPad = 8;          // bf16 rows d + 8 long: ldmatrix's 8 rows fall in distinct banks
constexpr int kProbStride = kTileKeys + 8;
constexpr int kScoreStride = kTileKeys + 1;

struct MmaSmem {
    __nv_bfloat16* q;      // [kGroup][ld]
    __nv_bfloat16* keys;   // [kTileKeys][ld]
    float* partial;        // [4][kGroup][kScoreStride]: the score quarters
    __nv_bfloat16* probs;  // [kGroup][kProbStride]
    float* rescale;        // [kGroup]
    float* max;            // [kGroup]
    float* sum;            // [kGroup]
    __device__ MmaSmem(char* base, int ld) {
        q = reinterpret_cast<__nv_bfloat16*>(base);
        keys = q + kGroup * ld;
        partial = reinterpret_cast<float*>(keys + kTileKeys * ld);
        probs = reinterpret_cast<__nv_bfloat16*>(partial + 4 * kGroup * kScoreStride);
        rescale = reinterpret_cast<float*>(probs + kGroup * kProbStride);
        max = rescale + kGroup;
        sum = max + kGroup;
    }
    static size_t bytes(int ld) {
        return 2 * (kGroup + kTileKeys) * ld + 4 * 4 * kGroup * kScoreStride + 2 * kGroup * kProbStride + 4 * 3 * kGroup;
    }
};

// Keys [i0, i0 + count) of the token's key list as bf16 rows; rows past `count` are zeros (their
// weights are zero, and a zero weight times stale data could still be NaN).
__device__ void stage_keys_bf16(const AttnParams& p, const attn::TokenKeys& tk, int i0, int count, __nv_bfloat16* keys,
                                int ld) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int k = warp; k < kTileKeys; k += kWarps) {
        const float* src = k < count ? attn::key_of(p, tk, i0 + k) : nullptr;
        for (int c = 4 * lane; c < p.d; c += 128) {
            float4 v = src != nullptr ? *reinterpret_cast<const float4*>(src + c) : float4{0, 0, 0, 0};
            store_bf16x4(keys + k * ld + c, v);
        }
    }
}

// The tile's scores, warp w's head tile (w % 2) over its quarter of head_dim (w / 2), into
// sm.partial[w / 2].
__device__ void score_quarter(const MmaSmem& sm, int d, int ld) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, mt = warp % 2, quarter = warp / 2;
    int width = d / 4, c0 = quarter * width;
    float acc[4][4] = {};
    for (int k0 = c0; k0 < c0 + width; k0 += 16) {
        uint32_t a[4];
        ldmatrix_x4(a, sm.q + (16 * mt + lane % 16) * ld + k0 + 8 * (lane / 16));
#pragma unroll
        for (int j = 0; j < 4; j += 2) {  // two key tiles per ldmatrix: (tile j, k 0-7), (j, 8-15), (j + 1, 0-7), (j + 1, 8-15)
            uint32_t b[4];
            ldmatrix_x4(b, sm.keys + (8 * (j + lane / 16) + lane % 8) * ld + k0 + 8 * ((lane / 8) % 2));
            mma_bf16(acc[j], a[0], a[1], a[2], a[3], b[0], b[1]);
            mma_bf16(acc[j + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
        }
    }
    float* out = sm.partial + quarter * kGroup * kScoreStride;
    int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) out[(16 * mt + g + 8 * (i / 2)) * kScoreStride + 8 * j + 2 * t + i % 2] = acc[j][i];
}

// Warp w's four heads: the tile's scores (lane = key) folded into their running (max, sum); the
// weights as bf16 and the rescale of earlier sums go to shared memory.
__device__ void softmax_tile(const MmaSmem& sm, float scale, int count, float (&m)[4], float (&l)[4]) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        int h = 4 * warp + u;
        float s = 0;
#pragma unroll
        for (int quarter = 0; quarter < 4; ++quarter) s += sm.partial[(quarter * kGroup + h) * kScoreStride + lane];
        float logit = lane < count ? s * scale : -INFINITY;
        float m_new = fmaxf(m[u], warp_max(logit));  // finite: every tile holds at least one key
        __nv_bfloat16 w = __float2bfloat16(lane < count ? expf(logit - m_new) : 0.0f);
        float rescale = expf(m[u] - m_new);
        l[u] = l[u] * rescale + warp_sum(__bfloat162float(w));
        m[u] = m_new;
        sm.probs[h * kProbStride + lane] = w;
        if (lane == 0) sm.rescale[h] = rescale;
    }
}

// acc (warp w's head tile w / 4 x its quarter of head_dim, 8-column tiles) = acc * rescale +
// weights · keys over the tile.
__device__ void accumulate_values(const MmaSmem& sm, int d, int ld, float (&acc)[kMaxDim / 32][4]) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, mt = warp / 4, g = lane / 4;
    int tiles = d / 32, c0 = (warp % 4) * (d / 4);
    float r_lo = sm.rescale[16 * mt + g], r_hi = sm.rescale[16 * mt + g + 8];
#pragma unroll
    for (int j = 0; j < kMaxDim / 32; ++j) acc[j][0] *= r_lo, acc[j][1] *= r_lo, acc[j][2] *= r_hi, acc[j][3] *= r_hi;
#pragma unroll
    for (int k0 = 0; k0 < kTileKeys; k0 += 16) {
        uint32_t a[4];
        ldmatrix_x4(a, sm.probs + (16 * mt + lane % 16) * kProbStride + k0 + 8 * (lane / 16));
#pragma unroll
        for (int j = 0; j < kMaxDim / 32; j += 2) {  // (keys 0-7, tile j), (8-15, j), (0-7, j + 1), (8-15, j + 1)
            if (j >= tiles) break;
            uint32_t b[4];
            ldmatrix_x4_trans(b, sm.keys + (k0 + lane % 8 + 8 * ((lane / 8) % 2)) * ld + c0 + 8 * (j + lane / 16));
            mma_bf16(acc[j], a[0], a[1], a[2], a[3], b[0], b[1]);
            mma_bf16(acc[j + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
        }
    }
}

// out = acc / (sum + the sink's share), per head of warp w's tile.
__device__ void store_output(const AttnParams& p, const MmaSmem& sm, int row, int head0, const float (&acc)[kMaxDim / 32][4]) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, mt = warp / 4, g = lane / 4, t = lane % 4;
    int tiles = p.d / 32, c0 = (warp % 4) * (p.d / 4);
    float f[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        int h = 16 * mt + g + 8 * half;
        float sink = p.sinks[head0 + h], mh = sm.max[h], top = fmaxf(sink, mh);
        float keep = mh == -INFINITY ? 0.0f : expf(mh - top);
        f[half] = keep / (sm.sum[h] * keep + expf(sink - top));
    }
#pragma unroll
    for (int j = 0; j < kMaxDim / 32; ++j) {
        if (j >= tiles) break;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float* out = p.out + (static_cast<long long>(row) * p.heads + head0 + 16 * mt + g + 8 * half) * p.d;
            float2 v{acc[j][2 * half] * f[half], acc[j][2 * half + 1] * f[half]};
            *reinterpret_cast<float2*>(out + c0 + 8 * j + 2 * t) = v;
        }
    }
}

// MinBlocks 2 caps registers at 128 (two blocks an SM, a few spilled); 1 leaves them uncapped.
template <int MinBlocks>
__global__ void __launch_bounds__(kThreads, MinBlocks) attention_mma_kernel(AttnParams p) {
    pdl_prologue();
    extern __shared__ float4 smem4[];
    int ld = p.d + kRowPad;
    MmaSmem sm(reinterpret_cast<char*>(smem4), ld);
    int groups = p.heads / kGroup;
    int row = blockIdx.x / groups, head0 = (blockIdx.x % groups) * kGroup;
    attn::TokenKeys tk;
    if (!attn::token_keys(p, row, tk)) return;

    const float* q = p.q + (static_cast<long long>(row) * p.heads + head0) * p.d;
    for (int i = 4 * threadIdx.x; i < kGroup * p.d; i += 4 * kThreads)
        store_bf16x4(sm.q + (i / p.d) * ld + i % p.d, *reinterpret_cast<const float4*>(q + i));

    float acc[kMaxDim / 32][4] = {};
    float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, l[4] = {0, 0, 0, 0};
    for (int i0 = 0; i0 < tk.total; i0 += kTileKeys) {
        int count = min(kTileKeys, tk.total - i0);
        __syncthreads();  // the previous tile's keys and weights are used up
        stage_keys_bf16(p, tk, i0, count, sm.keys, ld);
        __syncthreads();
        score_quarter(sm, p.d, ld);
        __syncthreads();
        softmax_tile(sm, p.scale, count, m, l);
        __syncthreads();
        accumulate_values(sm, p.d, ld, acc);
    }
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0)
        for (int u = 0; u < 4; ++u) sm.max[4 * warp + u] = m[u], sm.sum[4 * warp + u] = l[u];
    __syncthreads();
    store_output(p, sm, row, head0, acc);
}

}  // namespace

bool AttentionFamily::launch_mma(const AttnParams& p, int tokens) {
    if (!dev_.knobs().attention_mma || !dev_.fast_kernels() || p.mode == attn::kBlockMode || p.heads % kGroup != 0 ||
        p.d % 64 != 0 || p.d > kMaxDim)
        return false;
    size_t smem = MmaSmem::bytes(p.d + kRowPad);
    if (smem > mma_smem_) {  // raised once for the largest head_dim seen on this device
        for (auto kernel : {attention_mma_kernel<1>, attention_mma_kernel<2>})
            DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        mma_smem_ = smem;
    }
    auto kernel = dev_.knobs().attention_mma_blocks == 1 ? attention_mma_kernel<1> : attention_mma_kernel<2>;
    launch_pdl(kernel, tokens * (p.heads / kGroup), kThreads, smem, dev_.stream(), p);
    return true;
}

}  // namespace deepinfer::kernels::cuda
