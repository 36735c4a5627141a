// Attention of steps with many query tokens (prefill, large batches), tiled. Every head reads
// the same keys (one kv head), so a block takes one token's group of up to kMaxGroup heads: a
// tile of kTileKeys keys is staged in shared memory once and serves every head of the group
// (the per-(token, head) kernel in attention.cu reads each key once per head). Per tile:
//   scores: warp w owns heads 2w and 2w+1, lane i key i of the tile (dot products over the
//           staged query rows), then the online softmax of its two heads across the lanes;
//   values: thread t adds the tile's weighted keys into its 4 heads x 8 columns of the output.
// Arithmetic is fp32 throughout (the exact precision's attention); the sink joins at the end.
// A head's result has the same bits whatever the group size and the step's other tokens, so
// deterministic mode takes this kernel for every step size.
#include <algorithm>

#include "kernels/cuda/attention_common.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using attn::AttnParams;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxGroup = 2 * kWarps;   // heads per block: two per warp in the scores
constexpr int kTileKeys = 32;           // one per lane in the scores
constexpr int kQuadThreads = 64;        // values: threads per 4-head quad, each 4 columns x kSlices
constexpr int kSlices = 2;              // columns 4 * ct + 256 * j (head_dim <= 512)
constexpr int kPad = 4;                 // shared row stride d + 4: consecutive rows in other banks

// Shared memory of a block: query rows [group][ld], the key tile [kTileKeys][ld], the tile's
// weights [kTileKeys][kMaxGroup], per head the rescale of the running sums and the final (max, sum).
struct TileSmem {
    float* q;
    float* keys;
    float* weights;
    float* rescale;
    float* max;
    float* sum;
    __device__ TileSmem(float* base, int ld) {
        q = base;
        keys = q + kMaxGroup * ld;
        weights = keys + kTileKeys * ld;
        rescale = weights + kTileKeys * kMaxGroup;
        max = rescale + kMaxGroup;
        sum = max + kMaxGroup;
    }
    static size_t bytes(int ld) { return sizeof(float) * ((kMaxGroup + kTileKeys) * ld + kTileKeys * kMaxGroup + 3 * kMaxGroup); }
};

// Stages keys [i0, i0 + count) of the token's key list: warp w copies keys w, w + kWarps, ...
__device__ void stage_keys(const AttnParams& p, const attn::TokenKeys& tk, int i0, int count, float* keys, int ld) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int k = warp; k < count; k += kWarps) {
        const float* src = attn::key_of(p, tk, i0 + k);
        for (int c = 4 * lane; c < p.d; c += 128)
            *reinterpret_cast<float4*>(keys + k * ld + c) = *reinterpret_cast<const float4*>(src + c);
    }
}

// Scores of the staged tile for warp's two heads (lane = key), folded into the running (max, sum)
// of each head; the weights and the rescale of earlier sums go to shared memory.
__device__ void score_tile(const AttnParams& p, int group, int count, const TileSmem& sm, int ld, float (&m)[2],
                           float (&l)[2]) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int h0 = 2 * warp;
    if (h0 >= group) return;
    bool two = h0 + 1 < group;
    const float* qa = sm.q + h0 * ld;
    const float* qb = sm.q + (two ? h0 + 1 : h0) * ld;
    const float* k = sm.keys + lane * ld;
    float da = 0, db = 0;
    if (lane < count)
        for (int c = 0; c < p.d; c += 4) {
            float4 kv = *reinterpret_cast<const float4*>(k + c);
            da += attn::dot4(*reinterpret_cast<const float4*>(qa + c), kv);
            db += attn::dot4(*reinterpret_cast<const float4*>(qb + c), kv);
        }
    float logit[2] = {lane < count ? da * p.scale : -INFINITY, lane < count ? db * p.scale : -INFINITY};
    for (int u = 0; u < (two ? 2 : 1); ++u) {
        float m_new = fmaxf(m[u], warp_max(logit[u]));
        float rescale = expf(m[u] - m_new);  // m_new is finite: every tile holds at least one key
        float w = lane < count ? expf(logit[u] - m_new) : 0.0f;
        l[u] = l[u] * rescale + warp_sum(w);
        m[u] = m_new;
        sm.weights[lane * kMaxGroup + h0 + u] = w;
        if (lane == 0) sm.rescale[h0 + u] = rescale;
    }
}

__global__ void __launch_bounds__(kThreads) attention_tiled_kernel(AttnParams p, int group) {
    pdl_prologue();
    extern __shared__ float4 smem4[];
    int ld = p.d + kPad;
    TileSmem sm(reinterpret_cast<float*>(smem4), ld);
    int groups = p.heads / group;
    int row = blockIdx.x / groups, head0 = (blockIdx.x % groups) * group;
    attn::TokenKeys tk;
    if (!attn::token_keys(p, row, tk)) return;

    const float* q = p.q + (static_cast<long long>(row) * p.heads + head0) * p.d;
    for (int i = 4 * threadIdx.x; i < group * p.d; i += 4 * kThreads)
        *reinterpret_cast<float4*>(sm.q + (i / p.d) * ld + i % p.d) = *reinterpret_cast<const float4*>(q + i);

    int quad = threadIdx.x / kQuadThreads, ct = threadIdx.x % kQuadThreads;
    float4 acc[4][kSlices] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
    for (int i0 = 0; i0 < tk.total; i0 += kTileKeys) {
        int count = min(kTileKeys, tk.total - i0);
        __syncthreads();  // the previous tile's keys and weights are used up
        stage_keys(p, tk, i0, count, sm.keys, ld);
        __syncthreads();
        score_tile(p, group, count, sm, ld, m, l);
        __syncthreads();
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            int h = 4 * quad + u;
            float r = h < group ? sm.rescale[h] : 0.0f;
#pragma unroll
            for (int j = 0; j < kSlices; ++j) acc[u][j].x *= r, acc[u][j].y *= r, acc[u][j].z *= r, acc[u][j].w *= r;
        }
        if (4 * quad >= group) continue;
        for (int k = 0; k < count; ++k) {
            float4 w = *reinterpret_cast<const float4*>(sm.weights + k * kMaxGroup + 4 * quad);
            float wu[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int j = 0; j < kSlices; ++j) {
                int c = 4 * ct + 256 * j;
                if (c >= p.d) continue;
                float4 v = *reinterpret_cast<const float4*>(sm.keys + k * ld + c);
#pragma unroll
                for (int u = 0; u < 4; ++u)
                    acc[u][j].x += wu[u] * v.x, acc[u][j].y += wu[u] * v.y, acc[u][j].z += wu[u] * v.z, acc[u][j].w += wu[u] * v.w;
            }
        }
    }
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0)
        for (int u = 0; u < 2; ++u)
            if (2 * warp + u < group) sm.max[2 * warp + u] = m[u], sm.sum[2 * warp + u] = l[u];
    __syncthreads();
    // The sink joins the softmax's denominator; then normalise.
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        int h = 4 * quad + u;
        if (h >= group) continue;
        float sink = p.sinks[head0 + h], mh = sm.max[h], top = fmaxf(sink, mh);
        float keep = mh == -INFINITY ? 0.0f : expf(mh - top);
        float inv = 1.0f / (sm.sum[h] * keep + expf(sink - top));
        float* out = p.out + (static_cast<long long>(row) * p.heads + head0 + h) * p.d;
#pragma unroll
        for (int j = 0; j < kSlices; ++j) {
            int c = 4 * ct + 256 * j;
            if (c >= p.d) continue;
            float f = keep * inv;
            *reinterpret_cast<float4*>(out + c) = float4{acc[u][j].x * f, acc[u][j].y * f, acc[u][j].z * f, acc[u][j].w * f};
        }
    }
}

// The largest divisor of `heads` up to `most` (every block takes a whole group).
int head_group(int heads, int most) {
    for (int g = std::min(heads, most); g > 1; --g)
        if (heads % g == 0) return g;
    return 1;
}

}  // namespace

bool AttentionFamily::launch_tiled(const AttnParams& p, int tokens) {
    if (!dev_.knobs().attention_tiled || p.d % 4 != 0 || p.d > 4 * kQuadThreads * kSlices || p.mode == attn::kBlockMode)
        return false;
    int group = head_group(p.heads, kMaxGroup);
    // Deterministic mode runs every step size here: steps too small to fill the GPU get smaller
    // groups (a head's arithmetic does not depend on its group, so the bits stay the same).
    if (dev_.invariant())
        while (group > 1 && tokens * (p.heads / group) < 2 * dev_.sm_count()) group = head_group(p.heads, group - 1);
    size_t smem = TileSmem::bytes(p.d + kPad);
    if (smem > tiled_smem_) {  // raised once for the largest head_dim seen on this device
        DI_CUDA_CHECK(cudaFuncSetAttribute(attention_tiled_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
        tiled_smem_ = smem;
    }
    launch_pdl(attention_tiled_kernel, tokens * (p.heads / group), kThreads, smem, dev_.stream(), p, group);
    return true;
}

}  // namespace deepinfer::kernels::cuda
