// Compressors and the lightning indexer on the GPU.
//  - compressor_update: the windows that close in this step are listed on the host; one block per
//    window pools its tokens (from this step's rows, or the carry ring for earlier positions),
//    normalises, ropes and stores the entry; then the step's last tokens go into the carry ring.
//  - indexer_topk: per token, one warp per visible entry scores Σ_h w_h·relu(q_h·k) (a lane per
//    head, queries in shared memory; in the fast precision indexer_mma.cu on tensor cores); the
//    top k (ties to the lower id, valid picks first) by rank counting for rows of up to 2,048
//    entries (unless a long prefill makes that quadratic work large), else by a bitonic sort of
//    the row up to 8,192 entries, else by repeated block-wide argmax. All three give the same ids
//    in the same order.
#include <vector>

#include "kernels/cuda/indexer_common.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using indexer::IndexParams;
using indexer::token_info;
using indexer::visible_entries;

constexpr int kMaxDim = 1024;

struct CompParams {
    const float* kv;     // [N, c*dim]
    const float* gate;   // [N, c*dim]
    const float* ape;    // [rate, c*dim]
    const float* norm;   // [dim]
    const float* inv_freq;
    float* carry;        // [states, slots, 2*c*dim]
    float* pool;         // [blocks, block, dim]
    const DeviceSeq* seqs;
    const int* tables;
    const int* windows;  // pairs (seq, window)
    int dim, rate, overlap, rope_dim, block;
    float norm_eps, rope_scale;
    int slots;  // carry rows per state: position p in row p % slots (>= (overlap ? 2 : 1) * rate)
};

// kv (which = 0) or gate (which = 1) value of position q, channel column col.
__device__ float token_value(const CompParams& p, const DeviceSeq& s, long long q, int which, int col) {
    int c = p.overlap ? 2 : 1, slots = p.slots;
    if (q >= s.start_pos) {
        long long row = s.token_begin + (q - s.start_pos);
        return (which == 0 ? p.kv : p.gate)[row * c * p.dim + col];
    }
    const float* slot = p.carry + (static_cast<long long>(s.state_idx) * slots + q % slots) * 2 * c * p.dim;
    return slot[which * c * p.dim + col];
}

__global__ void compress_windows_kernel(CompParams p) {
    pdl_prologue();
    int si = p.windows[2 * blockIdx.x], w = p.windows[2 * blockIdx.x + 1];
    const DeviceSeq s = p.seqs[si];
    int c = p.overlap ? 2 : 1, off = p.overlap ? p.dim : 0;
    __shared__ float entry[kMaxDim];
    for (int ch = threadIdx.x; ch < p.dim; ch += blockDim.x) {
        float mx = -INFINITY;
        for (int pass = 0; pass < 2; ++pass) {  // pass 0: max, pass 1: weighted sum
            float sum = 0, acc = 0;
            if (p.overlap && w > 0)
                for (int j = 0; j < p.rate; ++j) {
                    long long q = static_cast<long long>(w - 1) * p.rate + j;
                    float logit = token_value(p, s, q, 1, ch) + p.ape[j * c * p.dim + ch];
                    if (pass == 0) mx = fmaxf(mx, logit);
                    else sum += expf(logit - mx), acc += expf(logit - mx) * token_value(p, s, q, 0, ch);
                }
            for (int j = 0; j < p.rate; ++j) {
                long long q = static_cast<long long>(w) * p.rate + j;
                float logit = token_value(p, s, q, 1, off + ch) + p.ape[j * c * p.dim + off + ch];
                if (pass == 0) mx = fmaxf(mx, logit);
                else sum += expf(logit - mx), acc += expf(logit - mx) * token_value(p, s, q, 0, off + ch);
            }
            if (pass == 1) entry[ch] = acc / sum;
        }
    }
    __syncthreads();
    float ss = 0;
    for (int ch = threadIdx.x; ch < p.dim; ch += blockDim.x) ss += entry[ch] * entry[ch];
    ss = block_sum(ss);
    float inv = rsqrtf(ss / p.dim + p.norm_eps);
    for (int ch = threadIdx.x; ch < p.dim; ch += blockDim.x) entry[ch] = p.norm[ch] * (entry[ch] * inv);
    __syncthreads();
    rope_pairs(entry, p.dim, static_cast<long long>(w) * p.rate, p.inv_freq, p.rope_dim, p.rope_scale, false, threadIdx.x,
               blockDim.x);
    __syncthreads();
    const int* table = p.tables + s.table_offset;
    float* out = p.pool + (static_cast<long long>(table[w / p.block]) * p.block + w % p.block) * p.dim;
    for (int ch = threadIdx.x; ch < p.dim; ch += blockDim.x) out[ch] = entry[ch];
}

__global__ void carry_write_kernel(CompParams p, int num_seqs) {
    pdl_prologue();
    int row = blockIdx.x, si = -1;
    for (int i = 0; i < num_seqs; ++i)
        if (row >= p.seqs[i].token_begin && row < p.seqs[i].token_begin + p.seqs[i].num_tokens) si = i;
    if (si < 0) return;
    DeviceSeq s = p.seqs[si];
    int c = p.overlap ? 2 : 1, slots = p.slots, t = row - s.token_begin;
    if (t < s.num_tokens - slots) return;
    float* slot = p.carry + (static_cast<long long>(s.state_idx) * slots + (s.start_pos + t) % slots) * 2 * c * p.dim;
    const float* kv = p.kv + static_cast<long long>(row) * c * p.dim;
    const float* gate = p.gate + static_cast<long long>(row) * c * p.dim;
    constexpr int kHalf = kRowRegs / 2;  // strides of kv and of gate per chunk, loaded before stored
    for (int base = 0; base < c * p.dim; base += kHalf * blockDim.x) {
        float k[kHalf], g[kHalf];
#pragma unroll
        for (int i = 0; i < kHalf; ++i) {
            int col = base + threadIdx.x + i * blockDim.x;
            k[i] = col < c * p.dim ? kv[col] : 0.0f;
            g[i] = col < c * p.dim ? gate[col] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < kHalf; ++i) {
            int col = base + threadIdx.x + i * blockDim.x;
            if (col < c * p.dim) slot[col] = k[i], slot[c * p.dim + col] = g[i];
        }
    }
}

// One block per token. The token's queries sit in shared memory (rows padded by one float so that
// lanes reading different heads hit different banks); each warp copies one entry's key next to
// them and its lanes take a head each, so a score needs one warp reduction, not one per head.
__global__ void index_scores_kernel(IndexParams p) {
    pdl_prologue();
    extern __shared__ float smem[];
    int row = blockIdx.x;
    DeviceSeq s{};
    long long visible = 0;
    token_info(p, row, s, visible);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32, stride = p.dim + 1;
    float* q = smem;
    float* key = smem + p.heads * stride + warp * p.dim;
    const float* q_row = p.q + static_cast<long long>(row) * p.heads * p.dim;
    for (int i = threadIdx.x; i < p.heads * p.dim; i += blockDim.x) q[i / p.dim * stride + i % p.dim] = q_row[i];
    __syncthreads();
    const int* table = p.tables + s.table_offset;
    const float* w = p.weights + static_cast<long long>(row) * p.heads;
    for (long long e = warp; e < visible; e += warps) {
        const float* k = paged_row(p.pool, table, p.block, e, p.dim);
        for (int c = lane; c < p.dim; c += 32) key[c] = k[c];
        __syncwarp();
        float score = 0;
        for (int h = lane; h < p.heads; h += 32) {
            const float* qh = q + h * stride;
            float dot = 0;
            for (int c = 0; c < p.dim; ++c) dot += qh[c] * key[c];
            score += w[h] * p.scale * fmaxf(dot, 0.0f);
        }
        score = warp_sum(score);
        if (lane == 0) p.scores[static_cast<long long>(row) * p.max_visible + e] = score;
        __syncwarp();  // the key buffer is rewritten next
    }
}

__global__ void index_topk_kernel(IndexParams p) {
    pdl_prologue();
    int row = blockIdx.x;
    long long visible = visible_entries(p, row);
    float* sc = p.scores + static_cast<long long>(row) * p.max_visible;
    for (int k = 0; k < p.top_k; ++k) {
        float v = -INFINITY;
        int idx = -1;
        for (long long e = threadIdx.x; e < visible; e += blockDim.x)
            if (sc[e] > v || (sc[e] == v && idx >= 0 && e < idx)) v = sc[e], idx = static_cast<int>(e);
        int bi = block_argmax(v, idx);
        if (threadIdx.x == 0) {
            p.out[static_cast<long long>(row) * p.top_k + k] = bi;
            if (bi >= 0) sc[bi] = -INFINITY;  // taken
        }
        __syncthreads();
        if (visible <= k) {  // nothing left: pad
            for (int j = k + 1 + threadIdx.x; j < p.top_k; j += blockDim.x) p.out[static_cast<long long>(row) * p.top_k + j] = -1;
            return;
        }
    }
}

// The same selection by rank, for rows of at most kRankMaxVisible entries: each valid entry (score
// above -inf) counts the entries ahead of it (higher score, or equal with a lower id) and lands at
// that rank if it is below k; the tail after the valid ones is padded with -1. One pass, no
// per-pick barrier, so it is much faster than repeated argmax while the rows are short.
constexpr int kRankMaxVisible = 2048;

__global__ void index_rank_topk_kernel(IndexParams p) {
    pdl_prologue();
    __shared__ float sc[kRankMaxVisible];
    int row = blockIdx.x;
    int visible = static_cast<int>(visible_entries(p, row));
    const float* src = p.scores + static_cast<long long>(row) * p.max_visible;
    for (int e = threadIdx.x; e < visible; e += blockDim.x) sc[e] = src[e];
    __syncthreads();
    int* out = p.out + static_cast<long long>(row) * p.top_k;
    float valid = 0;
    for (int e = threadIdx.x; e < visible; e += blockDim.x) {
        float v = sc[e];
        if (v == -INFINITY) continue;
        valid += 1.0f;
        int rank = 0;
        for (int f = 0; f < visible; ++f) rank += sc[f] > v || (sc[f] == v && f < e);
        if (rank < p.top_k) out[rank] = e;
    }
    int picked = min(static_cast<int>(block_sum(valid)), p.top_k);
    for (int j = picked + threadIdx.x; j < p.top_k; j += blockDim.x) out[j] = -1;
}

// The same selection by sorting, for long prefills of rows of up to kSortMaxVisible entries: the
// row's (score, id) pairs as 64-bit keys that order by score descending, then id ascending (-0.0
// counted as +0.0, as the comparisons above do), bitonic-sorted in shared memory; the first k
// keys are the picks, -1 where a score is -inf (a candidate mask) or the row runs out.
constexpr int kSortMaxVisible = 8192;

__device__ __forceinline__ unsigned long long descending_key(float score, int id) {
    unsigned bits = __float_as_uint(score + 0.0f);  // -0.0 + 0.0 = +0.0
    unsigned ascending = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
    return (static_cast<unsigned long long>(~ascending) << 32) | static_cast<unsigned>(id);
}

__global__ void index_sort_topk_kernel(IndexParams p, int size) {  // size: a power of two >= every row's entries
    pdl_prologue();
    extern __shared__ unsigned long long keys[];
    int row = blockIdx.x;
    int visible = static_cast<int>(visible_entries(p, row));
    const float* sc = p.scores + static_cast<long long>(row) * p.max_visible;
    for (int e = threadIdx.x; e < size; e += blockDim.x) keys[e] = e < visible ? descending_key(sc[e], e) : ~0ULL;
    for (int span = 2; span <= size; span <<= 1)
        for (int half = span >> 1; half > 0; half >>= 1) {
            __syncthreads();
            for (int t = threadIdx.x; t < size / 2; t += blockDim.x) {
                int i = 2 * t - (t & (half - 1)), j = i + half;  // pairs (i, i + half) within runs of 2 * half
                bool up = (i & span) == 0;
                unsigned long long a = keys[i], b = keys[j];
                if ((a > b) == up) keys[i] = b, keys[j] = a;
            }
        }
    __syncthreads();
    int* out = p.out + static_cast<long long>(row) * p.top_k;
    for (int j = threadIdx.x; j < p.top_k; j += blockDim.x) {
        int id = j < visible ? static_cast<int>(keys[j] & 0xffffffffu) : -1;
        out[j] = id >= 0 && sc[id] != -INFINITY ? id : -1;
    }
}

// Rows with at most k visible entries select all of them (scores are finite without a candidate
// mask): ids in ascending order, then -1. Same set as the ranked selection; only the order of the
// picks differs, which attention does not depend on beyond fp32 summation order.
__global__ void index_select_all_kernel(IndexParams p) {
    pdl_prologue();
    int row = blockIdx.x;
    long long visible = visible_entries(p, row);
    int* out = p.out + static_cast<long long>(row) * p.top_k;
    for (int j = threadIdx.x; j < p.top_k; j += blockDim.x) out[j] = j < visible ? j : -1;
}

}  // namespace

void CudaBackend::compressor_update(std::span<const SeqSlice> seqs, const CompressorArgs& a) {
    DI_CUDA_OP("compressor_update");
    DI_CUDA_REQUIRE(a.dim <= kMaxDim, "cuda compressor: dim " + std::to_string(a.dim) + " is above 1024");
    DI_CUDA_REQUIRE(a.carry.dim(1) >= (a.overlap ? 2 : 1) * a.rate, "cuda compressor: carry shorter than its windows");
    std::vector<int> windows;
    for (size_t i = 0; i < seqs.size(); ++i)
        for (int t = 0; t < seqs[i].num_tokens; ++t)
            if ((seqs[i].start_pos + t + 1) % a.rate == 0) {
                windows.push_back(static_cast<int>(i));
                windows.push_back(static_cast<int>((seqs[i].start_pos + t) / a.rate));
            }
    int n = 0;
    for (const auto& s : seqs) n = std::max(n, s.token_begin + s.num_tokens);
    if (n == 0) return;
    auto [dseqs, tables] = upload_seqs(seqs, a.out);
    Tensor dwin = empty(DType::kI32, {static_cast<int64_t>(std::max<size_t>(windows.size(), 2))});
    if (!windows.empty())
        copy_to_device(dwin.raw(), windows.data(), windows.size() * sizeof(int));
    CompParams p{a.kv.data<float>(), a.gate.data<float>(), a.ape.data<float>(), a.norm.data<float>(),
                 a.rope.inv_freq.data<float>(), a.carry.data<float>(), a.out->pool.data<float>(), dseqs, tables,
                 dwin.data<int>(), a.dim, a.rate, a.overlap ? 1 : 0, a.rope.rope_dim, static_cast<int>(a.out->pool.dim(1)),
                 a.norm_eps, a.rope.scale, static_cast<int>(a.carry.dim(1))};
    if (!windows.empty()) launch_pdl(compress_windows_kernel, windows.size() / 2, 128, 0, stream(), p);
    launch_pdl(carry_write_kernel, n, 128, 0, stream(), p, static_cast<int>(seqs.size()));
}

void CudaBackend::indexer_topk(std::span<const SeqSlice> seqs, const IndexerArgs& a) {
    DI_CUDA_OP("indexer_topk");
    int n = 0;
    long long max_visible = 1;
    for (const auto& s : seqs) {
        n = std::max(n, s.token_begin + s.num_tokens);
        max_visible = std::max<long long>(max_visible, (s.start_pos + s.num_tokens) / a.rate);
    }
    if (n == 0) return;
    auto [dseqs, tables] = upload_seqs(seqs, a.keys);
    bool candidates = a.candidates_in.defined() || a.candidates_out.defined();
    if (!candidates && max_visible <= a.top_k && !invariant()) {  // every visible entry is picked: no scores needed
        IndexParams p{};
        p.seqs = dseqs, p.num_seqs = static_cast<int>(seqs.size()), p.out = a.out.data<int>();
        p.rate = a.rate, p.top_k = a.top_k;
        launch_pdl(index_select_all_kernel, n, 128, 0, stream(), p);
        return;
    }
    Tensor scores = empty(DType::kF32, {n, max_visible});
    IndexParams p{a.q.data<float>(), a.weights.data<float>(), a.keys->pool.data<float>(), dseqs, tables, scores.data<float>(),
                  a.out.data<int>(), static_cast<int>(seqs.size()), static_cast<int>(a.q.dim(1)), static_cast<int>(a.q.dim(2)),
                  a.rate, a.top_k, static_cast<int>(a.keys->pool.dim(1)), static_cast<int>(max_visible), a.scale};
    constexpr int kThreads = 256;
    size_t smem = (static_cast<size_t>(p.heads) * (p.dim + 1) + kThreads / 32 * static_cast<size_t>(p.dim)) * sizeof(float);
    if (smem > 48 * 1024)
        DI_CUDA_CHECK(cudaFuncSetAttribute(index_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    if (!launch_index_scores_mma(p, n)) launch_pdl(index_scores_kernel, n, kThreads, smem, stream(), p);
    if (a.candidates_in.defined() || a.candidates_out.defined()) candidate_stage(seqs, a, scores, max_visible);
    // Rank counting costs visible² per row: the lowest latency for decode, but long prefills of
    // long rows do less work with the argmax rounds (k per row). Both pick the same ids in the
    // same order (score, then lower id), so the choice keeps deterministic mode batch-invariant.
    bool by_rank = max_visible <= kRankMaxVisible && static_cast<double>(n) * max_visible * max_visible <= 2e9;
    if (by_rank) {
        launch_pdl(index_rank_topk_kernel, n, 256, 0, stream(), p);
    } else if (max_visible <= kSortMaxVisible && knobs().indexer_sort) {
        int size = 2;
        while (size < max_visible) size *= 2;
        size_t sort_smem = size * sizeof(unsigned long long);
        if (sort_smem > 48 * 1024)
            DI_CUDA_CHECK(cudaFuncSetAttribute(index_sort_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(sort_smem)));
        launch_pdl(index_sort_topk_kernel, n, std::min(1024, size / 2), sort_smem, stream(), p, size);
    } else {
        launch_pdl(index_topk_kernel, n, 256, 0, stream(), p);
    }
}

}  // namespace deepinfer::kernels::cuda
