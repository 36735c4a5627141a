// Attention of steps with a few query tokens (decode). All heads read the same keys (one kv head),
// so a block takes one token's group of kHeads heads (a warp each) over one share of its keys:
// each key comes from L2 once per block and from L1 for the group's other warps. The block
// first resolves its share's key addresses with all threads at once (window ring or this step's
// rows, block tables, the indexer's picks) into shared memory, so the walk over the keys
// (kKeysInFlight loads in flight per warp, values kept in registers for the weighted sum) waits
// on no address. Every block writes its heads' (max, sum, weighted values); the last of a
// group's blocks merges the shares (sink, inverse rope) and the grid's last block, once every
// block has read the rings, stores the step's keys into them.
#include <algorithm>

#include "kernels/cuda/attention_common.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using attn::AttnParams;

constexpr int kHeads = 8;          // heads (warps) per block
constexpr int kSlices = 4;         // lane's columns: 4 * lane + 128 * j + (0..3), j < kSlices (head_dim <= 512)
constexpr int kKeysInFlight = 8;   // keys a warp loads before reducing them
constexpr int kChunk = 256;        // key addresses resolved per pass
constexpr int kMaxSplits = 32;     // shares of a token's keys (one lane each in the merge)
constexpr int kMinShare = 8;       // keys per share at least

using Row = float4[kSlices];

__device__ __forceinline__ int column(int lane, int j) { return 4 * lane + 128 * j; }

__device__ __forceinline__ void load_row(const float* p, int d, int lane, Row& v) {
#pragma unroll
    for (int j = 0; j < kSlices; ++j)
        v[j] = column(lane, j) < d ? *reinterpret_cast<const float4*>(p + column(lane, j)) : float4{0, 0, 0, 0};
}

__device__ __forceinline__ void axpy4(float4& y, float a, float4 x) {
    y.x += a * x.x, y.y += a * x.y, y.z += a * x.z, y.w += a * x.w;
}

__device__ __forceinline__ void scale4(float4& y, float a) { y.x *= a, y.y *= a, y.z *= a, y.w *= a; }

// Rope (or its inverse) of the pairs (2i, 2i+1) of the trailing rope_dim columns; a pair never
// straddles a float4 (the rope part starts at an even column, d % 4 == 0).
__device__ void rope_row(Row& v, int d, int lane, long long pos, const float* inv_freq, int rope_dim, float scale,
                         bool inverse) {
    int first = d - rope_dim;
#pragma unroll
    for (int j = 0; j < kSlices; ++j)
#pragma unroll
        for (int t = 0; t < 4; t += 2) {
            int c = column(lane, j) + t;
            if (c < first || c >= d) continue;
            float sn, cs;
            sincosf(static_cast<float>(pos) * inv_freq[(c - first) / 2], &sn, &cs);  // full range reduction
            float co = cs * scale, si = inverse ? -sn * scale : sn * scale;
            float& a = t == 0 ? v[j].x : v[j].z;
            float& b = t == 0 ? v[j].y : v[j].w;
            float a0 = a, b0 = b;
            a = a0 * co - b0 * si;
            b = b0 * co + a0 * si;
        }
}

// The query's RMS norm (no weight) and rope, as norm_rope_many would apply them.
__device__ void prepare_query(const AttnParams& p, long long pos, int lane, Row& q) {
    if (p.q_norm) {
        float ss = 0;
        for (int j = 0; j < kSlices; ++j) ss += attn::dot4(q[j], q[j]);  // zero past d
        float inv = rsqrtf(warp_sum(ss) / p.d + p.q_eps);
        for (int j = 0; j < kSlices; ++j) scale4(q[j], inv);
    }
    if (p.q_inv_freq != nullptr) rope_row(q, p.d, lane, pos, p.q_inv_freq, p.q_rope_dim, p.q_rope_scale, false);
}

// Online-softmax state of one warp's head over a share of the keys.
struct Share {
    float m = -INFINITY, l = 0.0f;
    Row acc = {};
};

// The warp's head against keys[0, count) (addresses in shared memory).
__device__ void walk_keys(const AttnParams& p, const Row& q, const float* const* keys, int count, int lane, Share& sh) {
    for (int i0 = 0; i0 < count; i0 += kKeysInFlight) {
        Row k[kKeysInFlight];
        float logit[kKeysInFlight];
#pragma unroll
        for (int u = 0; u < kKeysInFlight; ++u) {
            if (i0 + u < count) load_row(keys[i0 + u], p.d, lane, k[u]);
            else
                for (int j = 0; j < kSlices; ++j) k[u][j] = float4{0, 0, 0, 0};
        }
        float m_new = sh.m;
#pragma unroll
        for (int u = 0; u < kKeysInFlight; ++u) {
            float dot = 0;
            for (int j = 0; j < kSlices; ++j) dot += attn::dot4(q[j], k[u][j]);
            logit[u] = i0 + u < count ? warp_sum(dot) * p.scale : -INFINITY;
            m_new = fmaxf(m_new, logit[u]);
        }
        float corr = expf(sh.m - m_new);  // the first round: exp(-inf) = 0
        sh.l *= corr;
        for (int j = 0; j < kSlices; ++j) scale4(sh.acc[j], corr);
#pragma unroll
        for (int u = 0; u < kKeysInFlight; ++u) {
            float w = i0 + u < count ? expf(logit[u] - m_new) : 0.0f;
            sh.l += w;
            for (int j = 0; j < kSlices; ++j) axpy4(sh.acc[j], w, k[u][j]);
        }
        sh.m = m_new;
    }
}

// out = (Σ_s e^(m_s - M) acc_s) / (e^(sink - M) + Σ_s e^(m_s - M) l_s) of one (row, head) on
// one warp (lane s holds share s's max and sum), then the epilogue's inverse rope. The shares
// come through L2: other blocks wrote them.
__device__ void merge_head(const AttnParams& p, long long head_row, int lane) {
    const float* acc = p.partial + head_row * p.splits * p.d;
    const float* ml = p.partial + static_cast<long long>(gridDim.x / p.groups) * p.heads * p.splits * p.d + head_row * p.splits * 2;
    float m = lane < p.splits ? __ldcg(ml + 2 * lane) : -INFINITY;
    float l = lane < p.splits ? __ldcg(ml + 2 * lane + 1) : 0.0f;
    float sink = p.sinks[head_row % p.heads], M = fmaxf(sink, warp_max(m));
    float f = m == -INFINITY ? 0.0f : expf(m - M);
    float inv_total = 1.0f / (expf(sink - M) + warp_sum(l * f));
    Row o = {};
    for (int s = 0; s < p.splits; ++s) {
        float fs = __shfl_sync(0xffffffffu, f, s);
        if (fs == 0.0f) continue;
#pragma unroll
        for (int j = 0; j < kSlices; ++j)
            if (column(lane, j) < p.d) axpy4(o[j], fs, __ldcg(reinterpret_cast<const float4*>(acc + s * p.d + column(lane, j))));
    }
    for (int j = 0; j < kSlices; ++j) scale4(o[j], inv_total);
    const attn::MergeEpilogue& epi = p.epi;
    if (epi.positions != nullptr)
        rope_row(o, p.d, lane, epi.positions[head_row / p.heads], epi.inv_freq, epi.rope_dim, epi.rope_scale, true);
    float* out = p.out + head_row * p.d;
    for (int j = 0; j < kSlices; ++j)
        if (column(lane, j) < p.d) *reinterpret_cast<float4*>(out + column(lane, j)) = o[j];
}

// Block (token row x head group, share): grid.x = rows * groups, grid.y = splits.
__global__ void __launch_bounds__(kHeads * 32) attention_decode_kernel(AttnParams p) {
    pdl_prologue();
    int row = blockIdx.x / p.groups, h = (blockIdx.x % p.groups) * kHeads + threadIdx.x / 32, lane = threadIdx.x % 32;
    bool head = h < p.heads;
    Share sh;
    attn::TokenKeys tk;
    if (attn::token_keys(p, row, tk)) {  // uniform over the block
        int share = (tk.total + p.splits - 1) / p.splits, first = blockIdx.y * share, last = min(tk.total, first + share);
        Row q = {};
        if (head) {
            load_row(p.q + (static_cast<long long>(row) * p.heads + h) * p.d, p.d, lane, q);
            prepare_query(p, tk.pos, lane, q);
        }
        __shared__ const float* keys[kChunk];
        for (int c0 = first; c0 < last; c0 += kChunk) {
            int count = min(kChunk, last - c0);
            __syncthreads();  // the previous chunk's addresses are used up
            for (int t = threadIdx.x; t < count; t += blockDim.x) keys[t] = attn::key_of(p, tk, c0 + t);
            __syncthreads();
            if (head) walk_keys(p, q, keys, count, lane, sh);
        }
    }
    if (head) {  // this share's state (a row outside every sequence: max -inf, so the merge writes zeros)
        long long head_row = static_cast<long long>(row) * p.heads + h;
        float* acc = p.partial + (head_row * p.splits + blockIdx.y) * p.d;
        for (int j = 0; j < kSlices; ++j)
            if (column(lane, j) < p.d) *reinterpret_cast<float4*>(acc + column(lane, j)) = sh.acc[j];
        float* ml = p.partial + static_cast<long long>(gridDim.x / p.groups) * p.heads * p.splits * p.d +
                    (head_row * p.splits + blockIdx.y) * 2;
        if (lane == 0) ml[0] = sh.m, ml[1] = sh.l;
    }
    if (last_to_arrive(p.arrivals + blockIdx.x, gridDim.y) && head)
        merge_head(p, static_cast<long long>(row) * p.heads + h, lane);
    if (p.epi.positions == nullptr || !last_to_arrive(p.arrivals + gridDim.x, gridDim.x * gridDim.y)) return;
    for (int r = 0; r < static_cast<int>(gridDim.x) / p.groups; ++r)
        attn::store_ring_row(p.epi.seqs, p.epi.num_seqs, p.epi.kv, p.epi.ring, p.epi.slots, p.d, r);
}

}  // namespace

bool AttentionFamily::launch_decode(std::span<const SeqSlice> seqs, const AttentionArgs& a, const Tensor* positions,
                                    const Rope* out_rope, const QueryPrep& q_prep) {
    int heads = static_cast<int>(a.q.dim(1)), d = static_cast<int>(a.q.dim(2));
    int n = 0;
    for (const auto& s : seqs) n = std::max(n, s.token_begin + s.num_tokens);
    int groups = (heads + kHeads - 1) / kHeads;
    int sms = dev_.sm_count();
    if (!dev_.knobs().attention_decode || d % 4 != 0 || d > 128 * kSlices || n * groups > sms)
        return false;  // (the counters hold one more than the SMs)
    bool comp = a.compressed != AttentionArgs::Compressed::kNone;
    long long max_keys = a.window;
    if (a.compressed == AttentionArgs::Compressed::kSelected) max_keys += a.selected.dim(1);
    if (a.compressed == AttentionArgs::Compressed::kAllVisible)
        for (const auto& s : seqs) max_keys = std::max<long long>(max_keys, a.window + (s.start_pos + s.num_tokens) / a.rate);
    // About one block per SM, shares of at least kMinShare keys.
    int most = std::min(kMaxSplits, dev_.knobs().attention_decode_splits);
    int splits = static_cast<int>(
        std::clamp<long long>(std::min<long long>(sms / (n * groups), max_keys / kMinShare), 1, most));
    auto [dseqs, tables] = dev_.upload_seqs(seqs, comp ? a.entries : nullptr);
    Tensor partial = dev_.empty(DType::kF32, {static_cast<int64_t>(n) * heads * splits * (d + 2)});
    AttnParams p = attn::step_params(a, dseqs, tables, static_cast<int>(seqs.size()));
    p.q_norm = q_prep.norm;
    p.q_eps = q_prep.eps;
    if (q_prep.rope != nullptr)
        p.q_inv_freq = q_prep.rope->inv_freq.data<float>(), p.q_rope_dim = q_prep.rope->rope_dim,
        p.q_rope_scale = q_prep.rope->scale;
    p.splits = splits, p.groups = groups, p.partial = partial.data<float>(), p.arrivals = arrivals_.data<int>();
    if (positions != nullptr)
        p.epi = {positions->data<long long>(), out_rope->inv_freq.data<float>(), out_rope->rope_dim, out_rope->scale, dseqs,
                 static_cast<int>(seqs.size()), a.kv.data<float>(), a.ring.data<float>(), static_cast<int>(a.ring.dim(1))};
    launch_pdl(attention_decode_kernel, dim3(n * groups, splits), kHeads * 32, 0, dev_.stream(), p);
    return true;
}

}  // namespace deepinfer::kernels::cuda
