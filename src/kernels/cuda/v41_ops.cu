// DeepSeek-V4.1 ops on the GPU: delayed-mHC pieces, QAT fake quantisation, pair pooling and
// entry stores of the KV sources, the candidate stage of the two-level indexer, Engram's gate.
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend_impl.cuh"
#include "kernels/quant_grid.h"

namespace deepinfer::kernels::cuda {
namespace {

template <typename T>
Tensor to_device(CudaBackend& b, const std::vector<T>& v, DType dtype) {
    Tensor host = Tensor::empty(dtype, {static_cast<int64_t>(std::max<size_t>(v.size(), 1))});
    if (!v.empty()) std::memcpy(host.raw(), v.data(), v.size() * sizeof(T));
    return b.upload(host);
}

// out[n] = Σ_j pre[n, j] * streams[n, j] (one block per token).
__global__ void hc_collapse_kernel(const float* streams, const float* pre, int hc, long long d, float* out) {
    pdl_prologue();
    long long n = blockIdx.x;
    for (long long e = threadIdx.x; e < d; e += blockDim.x) {
        float acc = 0;
        for (int j = 0; j < hc; ++j) acc += pre[n * hc + j] * streams[(n * hc + j) * d + e];
        out[n * d + e] = acc;
    }
}

__global__ void fake_quantize_kernel(float* x, long long blocks, QuantFormat f) {
    pdl_prologue();
    long long b = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
    if (b < blocks) quant::quantize_block(f, x + b * quant::block_of(f), quant::block_of(f));
}

// One block per completed group: softmax over the group's tokens of gate, per channel, weighting
// kv. Tokens of this step come from its rows, earlier ones from the carry.
struct PoolGroup {
    int row0;             // first row of the sequence's slice in this step
    int state, out_row;
    long long first_pos;  // position of the group's first token
    long long start_pos;  // of the sequence's slice
};

__global__ void pool_groups_kernel(const float* kv, const float* gate, const float* carry, const PoolGroup* groups,
                                   int rate, int slots, int dim, float* out) {
    pdl_prologue();
    PoolGroup g = groups[blockIdx.x];
    for (int ch = threadIdx.x; ch < dim; ch += blockDim.x) {
        float mx = -INFINITY, sum = 0, acc = 0;
        for (int pass = 0; pass < 2; ++pass)
            for (int j = 0; j < rate; ++j) {
                long long pos = g.first_pos + j;
                const float* k;
                const float* s;
                if (pos >= g.start_pos) {
                    long long row = g.row0 + (pos - g.start_pos);
                    k = kv + row * dim, s = gate + row * dim;
                } else {
                    const float* slot = carry + (static_cast<long long>(g.state) * slots + pos % slots) * 2 * dim;
                    k = slot, s = slot + dim;
                }
                if (pass == 0) mx = fmaxf(mx, s[ch]);
                else sum += expf(s[ch] - mx), acc += expf(s[ch] - mx) * k[ch];
            }
        out[static_cast<long long>(g.out_row) * dim + ch] = acc / sum;
    }
}

// carry[state, pos % slots] = kv | gate of one token (the last `slots` tokens of each slice).
__global__ void pool_carry_kernel(const float* kv, const float* gate, const long long* targets, int dim, float* carry) {
    pdl_prologue();
    long long row = targets[2 * blockIdx.x], slot = targets[2 * blockIdx.x + 1];
    for (int ch = threadIdx.x; ch < dim; ch += blockDim.x) {
        carry[slot * 2 * dim + ch] = kv[row * dim + ch];
        carry[slot * 2 * dim + dim + ch] = gate[row * dim + ch];
    }
}

__global__ void copy_rows_kernel(const float* rows, const long long* dest, int dim, float* pool) {
    pdl_prologue();
    if (dest[blockIdx.x] < 0) return;  // a row that is not stored
    for (int c = threadIdx.x; c < dim; c += blockDim.x) pool[dest[blockIdx.x] * dim + c] = rows[blockIdx.x * static_cast<long long>(dim) + c];
}

// Entries outside a row's candidate blocks leave the competition (-inf).
__global__ void mark_candidates_kernel(const int* cand, int c, int max_blocks, unsigned char* marks) {
    pdl_prologue();
    int row = blockIdx.x;
    for (int i = threadIdx.x; i < c; i += blockDim.x) {
        int b = cand[static_cast<long long>(row) * c + i];
        if (b >= 0 && b < max_blocks) marks[static_cast<long long>(row) * max_blocks + b] = 1;
    }
}

__global__ void mask_scores_kernel(float* scores, long long ld, const int* visible, const unsigned char* marks,
                                   int max_blocks, int block) {
    pdl_prologue();
    int row = blockIdx.x;
    for (long long e = threadIdx.x; e < visible[row]; e += blockDim.x)
        if (!marks[static_cast<long long>(row) * max_blocks + e / block]) scores[row * ld + e] = -INFINITY;
}

// Block score = best visible entry; the block of the newest visible entry is pinned (+inf).
__global__ void block_scores_kernel(const float* scores, long long ld, const int* visible, int block, int max_blocks,
                                    float* out, int* counts) {
    pdl_prologue();
    int row = blockIdx.x;
    int nb = (visible[row] + block - 1) / block;
    for (int b = threadIdx.x; b < nb; b += blockDim.x) {
        float best = -INFINITY;
        for (long long e = static_cast<long long>(b) * block; e < min(static_cast<long long>(visible[row]), (b + 1LL) * block); ++e)
            best = fmaxf(best, scores[row * ld + e]);
        out[static_cast<long long>(row) * max_blocks + b] = b == nb - 1 ? INFINITY : best;
    }
    if (threadIdx.x == 0) counts[row] = nb;
}

// Top-k of scores[row, 0:counts[row]] (ties to the lower index), -1 padded; consumes scores.
__global__ void topk_rows_kernel(float* scores, long long ld, const int* counts, int k, int* out) {
    pdl_prologue();
    int row = blockIdx.x;
    float* sc = scores + row * ld;
    for (int t = 0; t < k; ++t) {
        float v = -INFINITY;
        int idx = -1;
        for (int e = threadIdx.x; e < counts[row]; e += blockDim.x)
            if (idx < 0 ? sc[e] > -INFINITY : (sc[e] > v || (sc[e] == v && e < idx))) v = sc[e], idx = e;
        int bi = block_argmax(v, idx);
        if (threadIdx.x == 0) {
            out[static_cast<long long>(row) * k + t] = bi;
            if (bi >= 0) sc[bi] = -INFINITY;
        }
        __syncthreads();
    }
}

// One block per (token, stream): the normalised stream . key decides how much of the value enters.
__global__ void engram_gate_kernel(float* streams, const float* kv, const float* weight, int hc, int d, float eps) {
    pdl_prologue();
    long long n = blockIdx.x / hc;
    int j = blockIdx.x % hc;
    float* h = streams + (n * hc + j) * d;
    const float* key = kv + (n * (hc + 1) + j) * d;
    const float* value = kv + (n * (hc + 1) + hc) * d;
    float hh = 0, kk = 0, dot = 0;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        hh += h[c] * h[c];
        kk += key[c] * key[c];
        dot += h[c] * weight[j * d + c] * key[c];
    }
    hh = block_sum(hh);
    kk = block_sum(kk);
    dot = block_sum(dot);
    float rstd = rsqrtf(hh / d + eps) * rsqrtf(kk / d + eps);
    float t = dot * rstd * rsqrtf(static_cast<float>(d));
    float g = sigmoidf(copysignf(sqrtf(fmaxf(fabsf(t), 1e-6f)), t));
    __syncthreads();
    for (int c = threadIdx.x; c < d; c += blockDim.x) h[c] += g * value[c];
}

}  // namespace

void CudaBackend::hc_collapse(const Tensor& streams, const Tensor& pre, Tensor& out) {
    DI_CUDA_OP("hc_collapse");
    int64_t n = streams.dim(0), hc = streams.dim(1), d = streams.dim(2);
    if (n == 0) return;
    launch_pdl(hc_collapse_kernel, n, 256, 0, stream(), streams.data<float>(), pre.data<float>(), static_cast<int>(hc),
               d, out.data<float>());
}

void CudaBackend::fake_quantize(Tensor& x, QuantFormat f) {
    DI_CUDA_OP("fake_quantize");
    int64_t cols = x.dim(-1), block = quant::block_of(f);
    if (x.numel() == 0 || cols % block != 0) return;
    long long blocks = x.numel() / block;
    launch_pdl(fake_quantize_kernel, blocks_for(blocks, 128), 128, 0, stream(), x.data<float>(), blocks, f);
}

void CudaBackend::pool_groups(std::span<const SeqSlice> seqs, const PoolArgs& a) {
    DI_CUDA_OP("pool_groups");
    int dim = static_cast<int>(a.kv.dim(1)), rate = a.rate, slots = static_cast<int>(a.carry.dim(1));
    DI_CUDA_REQUIRE(slots >= rate, "pool_groups: carry shorter than the rate");
    std::vector<PoolGroup> groups;
    std::vector<long long> carry_targets;
    for (const SeqSlice& s : seqs) {
        for (int64_t g = s.start_pos / rate; g < (s.start_pos + s.num_tokens) / rate; ++g)
            groups.push_back({s.token_begin, s.state_idx, static_cast<int>(groups.size()), g * rate, s.start_pos});
        for (int t = std::max(0, s.num_tokens - slots); t < s.num_tokens; ++t) {
            carry_targets.push_back(s.token_begin + t);
            carry_targets.push_back(static_cast<long long>(s.state_idx) * slots + (s.start_pos + t) % slots);
        }
    }
    DI_CUDA_REQUIRE(a.out.dim(0) == static_cast<int64_t>(groups.size()), "pool_groups: output rows do not match the groups");
    if (!groups.empty()) {
        Tensor dg = empty(DType::kU8, {static_cast<int64_t>(groups.size() * sizeof(PoolGroup))});
        copy_to_device(dg.raw(), groups.data(), groups.size() * sizeof(PoolGroup));
        launch_pdl(pool_groups_kernel, groups.size(), 128, 0, stream(), a.kv.data<float>(), a.gate.data<float>(),
                   a.carry.data<float>(), static_cast<const PoolGroup*>(dg.raw()), rate, slots, dim, a.out.data<float>());
    }
    if (!carry_targets.empty()) {  // after pooling: the pool kernel reads the slots these overwrite
        Tensor dt = to_device(*this, carry_targets, DType::kI64);
        launch_pdl(pool_carry_kernel, carry_targets.size() / 2, 128, 0, stream(), a.kv.data<float>(),
                   a.gate.data<float>(), dt.data<long long>(), dim, a.carry.data<float>());
    }
}

void CudaBackend::store_entries(std::span<const EntrySlot> slots, const Tensor& rows, const EntryStore& store) {
    DI_CUDA_OP("store_entries");
    if (slots.empty()) return;
    int64_t block = store.pool.dim(1), dim = store.pool.dim(2);
    std::vector<long long> dest;
    for (const EntrySlot& s : slots) {
        if (s.entry < 0) {  // not stored
            dest.push_back(-1);
            continue;
        }
        const auto& table = store.tables[s.seq];
        DI_CUDA_REQUIRE(s.entry / block < static_cast<int64_t>(table.size()), "store_entries: no block for the entry");
        dest.push_back(static_cast<long long>(table[s.entry / block]) * block + s.entry % block);
    }
    Tensor dd = to_device(*this, dest, DType::kI64);
    launch_pdl(copy_rows_kernel, slots.size(), 128, 0, stream(), rows.data<float>(), dd.data<long long>(),
               static_cast<int>(dim), store.pool.data<float>());
}

// The two-level selection around the entry top-k: entries outside candidates_in drop out, and
// candidates_out gets the row's best blocks (scores are read before the top-k consumes them).
void CudaBackend::candidate_stage(std::span<const SeqSlice> seqs, const IndexerArgs& a, Tensor& scores, int64_t ld) {
    int n = 0;
    for (const auto& s : seqs) n = std::max(n, s.token_begin + s.num_tokens);
    std::vector<int> visible(n, 0);
    for (const auto& s : seqs)
        for (int t = 0; t < s.num_tokens; ++t) visible[s.token_begin + t] = static_cast<int>((s.start_pos + t + 1) / a.rate);
    Tensor dv = to_device(*this, visible, DType::kI32);
    int bs = a.candidate_block_size, max_blocks = static_cast<int>((ld + bs - 1) / bs);
    if (a.candidates_in.defined()) {
        Tensor marks = zeros(DType::kU8, {static_cast<int64_t>(n) * max_blocks});
        int c = static_cast<int>(a.candidates_in.dim(1));
        launch_pdl(mark_candidates_kernel, n, 128, 0, stream(), a.candidates_in.data<int>(), c, max_blocks,
                   marks.data<unsigned char>());
        launch_pdl(mask_scores_kernel, n, 256, 0, stream(), scores.data<float>(), ld, dv.data<int>(),
                   marks.data<unsigned char>(), max_blocks, bs);
    }
    if (a.candidates_out.defined()) {
        Tensor bscores = empty(DType::kF32, {n, max_blocks}), counts = empty(DType::kI32, {n});
        launch_pdl(block_scores_kernel, n, 128, 0, stream(), scores.data<float>(), ld, dv.data<int>(), bs, max_blocks,
                   bscores.data<float>(), counts.data<int>());
        launch_pdl(topk_rows_kernel, n, 128, 0, stream(), bscores.data<float>(), max_blocks, counts.data<int>(),
                   static_cast<int>(a.candidates_out.dim(1)), a.candidates_out.data<int>());
    }
}

void CudaBackend::engram_gate(Tensor& streams, const Tensor& kv, const Tensor& weight, float eps) {
    DI_CUDA_OP("engram_gate");
    int64_t n = streams.dim(0), hc = streams.dim(1), d = streams.dim(2);
    if (n == 0) return;
    launch_pdl(engram_gate_kernel, n * hc, 256, 0, stream(), streams.data<float>(), kv.data<float>(),
               weight.data<float>(), static_cast<int>(hc), static_cast<int>(d), eps);
}

}  // namespace deepinfer::kernels::cuda
