#pragma once
// What the lightning indexer's kernels share (compressor.cu: scores on CUDA cores and the top-k;
// indexer_mma.cu: scores on tensor cores): their parameters and a token's visible entries.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda::indexer {

struct IndexParams {
    const float* q;        // [N, heads, dim]
    const float* weights;  // [N, heads]
    const float* pool;
    const DeviceSeq* seqs;
    const int* tables;
    float* scores;         // [N, max_visible]
    int* out;              // [N, top_k]
    int num_seqs, heads, dim, rate, top_k, block, max_visible;
    float scale;
};

__device__ inline void token_info(const IndexParams& p, int row, DeviceSeq& s, long long& visible) {
    for (int i = 0; i < p.num_seqs; ++i)
        if (row >= p.seqs[i].token_begin && row < p.seqs[i].token_begin + p.seqs[i].num_tokens) s = p.seqs[i];
    visible = (s.start_pos + (row - s.token_begin) + 1) / p.rate;
}

// Entries the token of `row` sees (its sequence slice found as token_info finds it).
__device__ inline long long visible_entries(const IndexParams& p, int row) {
    DeviceSeq s{};
    long long visible = 0;
    token_info(p, row, s, visible);
    return visible;
}

}  // namespace deepinfer::kernels::cuda::indexer
