#pragma once
// What the attention kernels share (attention.cu: a block per (token, head); attention_decode.cu:
// steps of a few tokens): their parameters and where each key lives.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda::attn {

// What attend_and_store adds to a decode step's merge: the step's keys into the rings and the
// output's inverse rope (positions null: neither).
struct MergeEpilogue {
    const long long* positions = nullptr;  // [N]
    const float* inv_freq = nullptr;
    int rope_dim = 0;
    float rope_scale = 1.0f;
    const DeviceSeq* seqs = nullptr;
    int num_seqs = 0;
    const float* kv = nullptr;  // [N, d]
    float* ring = nullptr;      // [states, slots, d]
    int slots = 0;
};

// The kernels' four-wide dot product (the same expression, so the same rounding, in each).
__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// AttnParams::mode of block_attention (0-2 are AttentionArgs::Compressed).
constexpr int kBlockMode = 3;

struct AttnParams {
    const float* q;     // [N, H, d]
    const float* kv;    // [N, d]
    const float* ring;  // [states, slots, d]
    const float* pool;  // [blocks, block, d] (compressed entries) or null
    const int* selected;  // [N, k] or null
    const DeviceSeq* seqs;
    const int* tables;
    const float* sinks;
    float* out;
    int num_seqs, heads, d, slots, window, mode, rate, top_k, block;
    float scale;
    // Decode steps only: query preparation (rms norm, then rope; q_inv_freq null: none), the
    // split shares' scratch ([N * H, splits, d] weighted values, then [N * H, splits, 2] (max,
    // sum)), the per (token, head group) block counters and one for the grid (zero between
    // launches), and the merge's epilogue.
    bool q_norm = false;
    float q_eps = 0;
    const float* q_inv_freq = nullptr;
    int q_rope_dim = 0;
    float q_rope_scale = 1.0f;
    int splits = 1, groups = 1;
    float* partial = nullptr;
    int* arrivals = nullptr;
    MergeEpilogue epi;
};

// The fields every attention kernel takes (the decode-only ones at their defaults).
inline AttnParams step_params(const AttentionArgs& a, const DeviceSeq* seqs, const int* tables, int num_seqs) {
    bool comp = a.compressed != AttentionArgs::Compressed::kNone, picks = a.compressed == AttentionArgs::Compressed::kSelected;
    return {a.q.data<float>(), a.kv.data<float>(), a.ring.data<float>(), comp ? a.entries->pool.data<float>() : nullptr,
            picks ? a.selected.data<int>() : nullptr, seqs, tables, a.sinks.data<float>(), a.out.data<float>(), num_seqs,
            static_cast<int>(a.q.dim(1)), static_cast<int>(a.q.dim(2)), static_cast<int>(a.ring.dim(1)), a.window,
            static_cast<int>(a.compressed), a.rate, picks ? static_cast<int>(a.selected.dim(1)) : 0,
            comp ? static_cast<int>(a.entries->pool.dim(1)) : 1, a.scale};
}

__device__ inline int seq_of(const DeviceSeq* seqs, int num_seqs, int row) {
    for (int s = 0; s < num_seqs; ++s)
        if (row >= seqs[s].token_begin && row < seqs[s].token_begin + seqs[s].num_tokens) return s;
    return -1;
}

// Key i of a token at `pos`: the window (ring, or this step's rows), then compressed entries
// (mode 1: all visible; mode 2: the indexer's picks, valid ones packed first).
__device__ inline const float* key_ptr(const AttnParams& p, const DeviceSeq& s, long long pos, int i,
                                       long long num_window) {
    if (p.mode == kBlockMode)  // DSpark block: the context [window_from, start_pos), then the block
        return i < num_window ? p.ring + (static_cast<long long>(s.state_idx) * p.slots + (s.window_from + i) % p.slots) * p.d
                              : p.kv + (s.token_begin + (i - num_window)) * static_cast<long long>(p.d);
    if (i < num_window) {
        long long q = pos - num_window + 1 + i;
        if (q >= s.start_pos) return p.kv + (s.token_begin + (q - s.start_pos)) * static_cast<long long>(p.d);
        return p.ring + (static_cast<long long>(s.state_idx) * p.slots + q % p.slots) * p.d;
    }
    int e = i - static_cast<int>(num_window);
    if (p.mode == 2) e = p.selected[(static_cast<long long>(s.token_begin) + pos - s.start_pos) * p.top_k + e];
    return paged_row(p.pool, p.tables + s.table_offset, p.block, e, p.d);
}

// Valid picks of the indexer for `row` (packed first), counted by the whole block (every
// thread calls it).
__device__ inline int count_picks(const AttnParams& p, int row) {
    int count = 0;
    for (int i0 = 0; i0 < p.top_k; i0 += blockDim.x) {
        int i = i0 + threadIdx.x;
        count += __syncthreads_count(i < p.top_k && p.selected[static_cast<long long>(row) * p.top_k + i] >= 0);
    }
    return count;
}

// A token's key list: its sequence slice, position, window keys and total keys (window, then
// compressed entries; for a DSpark block the context, then the block).
struct TokenKeys {
    DeviceSeq s;
    long long pos, num_window;
    int total;
};

// The key list of `row`'s token; false when the row belongs to no sequence (the same for every
// thread of a block; every thread must call it: the picks are counted block-wide).
__device__ inline bool token_keys(const AttnParams& p, int row, TokenKeys& k) {
    int si = seq_of(p.seqs, p.num_seqs, row);
    if (si < 0) return false;
    k.s = p.seqs[si];
    k.pos = k.s.start_pos + (row - k.s.token_begin);
    k.num_window = max(0LL, min(static_cast<long long>(p.window), k.pos + 1 - k.s.window_from));
    int num_comp = p.mode == 1 ? static_cast<int>((k.pos + 1) / p.rate) : p.mode == 2 ? count_picks(p, row) : 0;
    if (p.mode == kBlockMode) k.num_window = k.s.start_pos - k.s.window_from, num_comp = k.s.num_tokens;
    k.total = static_cast<int>(k.num_window) + num_comp;
    return true;
}

// Key i of the token's list.
__device__ inline const float* key_of(const AttnParams& p, const TokenKeys& k, int i) {
    return key_ptr(p, k.s, k.pos, i, k.num_window);
}

// Row `row`'s kv into its sequence's ring (only the last `slots` new tokens of a sequence: the
// others would be overwritten in this step anyway), threads striding the columns.
__device__ inline void store_ring_row(const DeviceSeq* seqs, int num_seqs, const float* kv, float* ring, int slots, int d,
                                      int row) {
    int si = seq_of(seqs, num_seqs, row);
    if (si < 0) return;
    DeviceSeq s = seqs[si];
    int t = row - s.token_begin;
    if (t < s.num_tokens - slots) return;
    long long slot = (s.start_pos + t) % slots;
    for (int c = threadIdx.x; c < d; c += blockDim.x)
        ring[(static_cast<long long>(s.state_idx) * slots + slot) * d + c] = kv[static_cast<long long>(row) * d + c];
}

}  // namespace deepinfer::kernels::cuda::attn
