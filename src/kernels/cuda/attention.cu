// Attention with sinks over the sliding window (ring + this step's new tokens) and compressed
// entries (all visible, or the indexer's picks). One block per (token, head) — or, for steps too
// small to fill the GPU, per (token, head, share of the keys), the last of a head's blocks to
// finish merging the shares; each warp walks its keys kKeysPerStep at a time (independent loads
// and reductions in flight) with an online softmax, then the warps' partial results are merged.
#include <algorithm>

#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kKeysPerStep = 4;
constexpr int kMaxPerLane = 16;  // head_dim <= 512

// What attend_and_store adds to a split step's merge: the step's keys into the rings and the
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
    float* partial;  // [N * heads, splits, 2 + d] when the keys are split over blocks, else null
    int num_seqs, heads, d, slots, window, mode, rate, top_k, block, splits;
    float scale;
    // Query preparation (attend_and_store): rms norm, then rope (q_inv_freq null: none).
    bool q_norm;
    float q_eps;
    const float* q_inv_freq;
    int q_rope_dim;
    float q_rope_scale;
    // Split steps: per (row, head) block counters, then one for the grid (zero between launches).
    int* arrivals;
    MergeEpilogue epi;
};

// The query row of lane's columns c = lane + 32 j (j < kMaxPerLane) normalised and roped in
// registers, as norm_rope_many would: every warp of the block prepares its own copy. Rope pairs
// (2i, 2i+1) sit in neighbouring lanes of the same j.
__device__ void prepare_query(const AttnParams& p, long long pos, float (&qr)[kMaxPerLane]) {
    int lane = threadIdx.x % 32;
    if (p.q_norm) {
        float ss = 0;
#pragma unroll
        for (int j = 0; j < kMaxPerLane; ++j) ss += qr[j] * qr[j];  // zero past d
        float inv = rsqrtf(warp_sum(ss) / p.d + p.q_eps);
#pragma unroll
        for (int j = 0; j < kMaxPerLane; ++j) qr[j] *= inv;
    }
    if (p.q_inv_freq == nullptr) return;
    int first = p.d - p.q_rope_dim;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
        int c = lane + 32 * j;
        float other = __shfl_xor_sync(0xffffffffu, qr[j], 1);
        if (c < first || c >= p.d) continue;
        float sn, cs;
        sincosf(static_cast<float>(pos) * p.q_inv_freq[(c - first) / 2], &sn, &cs);
        float co = cs * p.q_rope_scale, si = sn * p.q_rope_scale;
        qr[j] = c % 2 == 0 ? qr[j] * co - other * si : qr[j] * co + other * si;
    }
}

__device__ int seq_of(const DeviceSeq* seqs, int num_seqs, int row) {
    for (int s = 0; s < num_seqs; ++s)
        if (row >= seqs[s].token_begin && row < seqs[s].token_begin + seqs[s].num_tokens) return s;
    return -1;
}

__device__ const float* key_ptr(const AttnParams& p, const DeviceSeq& s, long long pos, int i, long long num_window) {
    if (i < num_window) {
        long long q = pos - num_window + 1 + i;
        if (q >= s.start_pos) return p.kv + (s.token_begin + (q - s.start_pos)) * static_cast<long long>(p.d);
        return p.ring + (static_cast<long long>(s.state_idx) * p.slots + q % p.slots) * p.d;
    }
    int e = i - static_cast<int>(num_window);
    if (p.mode == 2) e = p.selected[(static_cast<long long>(s.token_begin) + pos - s.start_pos) * p.top_k + e];
    const int* table = p.tables + s.table_offset;
    return p.pool + (static_cast<long long>(table[e / p.block]) * p.block + e % p.block) * p.d;
}

// Row `row`'s kv into its sequence's ring (only the last `slots` new tokens of a sequence: the
// others would be overwritten in this step anyway), threads striding the columns.
__device__ void store_ring_row(const DeviceSeq* seqs, int num_seqs, const float* kv, float* ring, int slots, int d, int row) {
    int si = seq_of(seqs, num_seqs, row);
    if (si < 0) return;
    DeviceSeq s = seqs[si];
    int t = row - s.token_begin;
    if (t < s.num_tokens - slots) return;
    long long slot = (s.start_pos + t) % slots;
    for (int c = threadIdx.x; c < d; c += blockDim.x)
        ring[(static_cast<long long>(s.state_idx) * slots + slot) * d + c] = kv[static_cast<long long>(row) * d + c];
}

// Block (row, head[, split])'s attention: the output row, or with splits its share's (max, sum,
// weighted values) for merge_head.
template <bool Prepare>
__device__ void attend(const AttnParams& p, int row, int h, int si) {
    const DeviceSeq s = p.seqs[si];
    long long pos = s.start_pos + (row - s.token_begin);
    long long num_window = max(0LL, min(static_cast<long long>(p.window), pos + 1 - s.window_from));
    // Keys: the window, then compressed entries; for kSelected only the valid (>= 0) picks, which
    // the indexer packs first.
    int num_comp = 0;
    if (p.mode == 1) num_comp = static_cast<int>((pos + 1) / p.rate);
    if (p.mode == 2)
        while (num_comp < p.top_k && p.selected[static_cast<long long>(row) * p.top_k + num_comp] >= 0) ++num_comp;
    int total = static_cast<int>(num_window) + num_comp;
    // With splits, block (row, head, split) takes one contiguous share of the keys.
    int share = (total + p.splits - 1) / p.splits, first = blockIdx.y * share, last = min(total, first + share);

    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float* q = p.q + (static_cast<long long>(row) * p.heads + h) * p.d;
    float qr[kMaxPerLane], acc[kMaxPerLane];  // indexed by constants only, so they stay in registers
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
        int c = lane + 32 * j;
        qr[j] = c < p.d ? q[c] : 0.0f;
        acc[j] = 0.0f;
    }
    if constexpr (Prepare) prepare_query(p, pos, qr);
    float m = -INFINITY, l = 0.0f;
    for (int i0 = first + warp * kKeysPerStep; i0 < last; i0 += kWarps * kKeysPerStep) {
        const float* k[kKeysPerStep];
        float logit[kKeysPerStep];
        for (int u = 0; u < kKeysPerStep; ++u) {
            k[u] = i0 + u < last ? key_ptr(p, s, pos, i0 + u, num_window) : nullptr;
            float dot = 0;
            if (k[u] != nullptr)
#pragma unroll
                for (int j = 0; j < kMaxPerLane; ++j) {
                    int c = lane + 32 * j;
                    if (c < p.d) dot += qr[j] * k[u][c];
                }
            logit[u] = dot;
        }
        float m_new = m;
        for (int u = 0; u < kKeysPerStep; ++u) {
            logit[u] = k[u] != nullptr ? warp_sum(logit[u]) * p.scale : -INFINITY;
            m_new = fmaxf(m_new, logit[u]);
        }
        float corr = expf(m - m_new), w[kKeysPerStep];
        l *= corr;
        for (int u = 0; u < kKeysPerStep; ++u) l += w[u] = k[u] != nullptr ? expf(logit[u] - m_new) : 0.0f;
#pragma unroll
        for (int j = 0; j < kMaxPerLane; ++j) {
            int c = lane + 32 * j;
            if (c >= p.d) continue;
            float a = acc[j] * corr;
            for (int u = 0; u < kKeysPerStep; ++u)
                if (k[u] != nullptr) a += w[u] * k[u][c];
            acc[j] = a;
        }
        m = m_new;
    }
    __shared__ float sm[kWarps], sl[kWarps];
    __shared__ float sacc[kWarps][kMaxPerLane * 32];
    if (lane == 0) sm[warp] = m, sl[warp] = l;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j)
        if (lane + 32 * j < p.d) sacc[warp][lane + 32 * j] = acc[j];
    __syncthreads();
    // Merge the warps; a split block stores (max, sum, weighted values) for merge_head,
    // a whole block adds the sink and normalises.
    bool split = p.partial != nullptr;
    float sink = p.sinks[h], M = split ? -INFINITY : sink;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm[w]);
    float L = split ? 0.0f : expf(sink - M);
    for (int w = 0; w < kWarps; ++w) L += sm[w] == -INFINITY ? 0.0f : sl[w] * expf(sm[w] - M);
    long long head_row = static_cast<long long>(row) * p.heads + h;
    float* out = split ? p.partial + (head_row * p.splits + blockIdx.y) * (2 + p.d) + 2 : p.out + head_row * p.d;
    if (split && threadIdx.x == 0) out[-2] = M, out[-1] = L;
    for (int c = threadIdx.x; c < p.d; c += blockDim.x) {
        float v = 0;
        for (int w = 0; w < kWarps; ++w)
            if (sm[w] != -INFINITY) v += sacc[w][c] * expf(sm[w] - M);
        out[c] = split ? v : v / L;
    }
}

// out = (Σ_split e^(m_s - M) acc_s) / (e^(sink - M) + Σ_split e^(m_s - M) l_s) for one (row, head),
// the block's threads striding the columns, then the epilogue's inverse rope. The splits' scale
// factors are computed once into shared memory. Partials come through L2: other blocks wrote them.
constexpr int kMaxSplits = 8;

__device__ void merge_head(const AttnParams& p, long long head_row) {
    const float* part = p.partial + head_row * p.splits * (2 + p.d);
    __shared__ float m[kMaxSplits], l[kMaxSplits], f[kMaxSplits];
    __shared__ float inv_total;
    if (threadIdx.x < p.splits)
        m[threadIdx.x] = __ldcg(part + threadIdx.x * (2 + p.d)), l[threadIdx.x] = __ldcg(part + threadIdx.x * (2 + p.d) + 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        float sink = p.sinks[head_row % p.heads], M = sink;
        for (int s = 0; s < p.splits; ++s) M = fmaxf(M, m[s]);
        float L = expf(sink - M);
        for (int s = 0; s < p.splits; ++s) {
            f[s] = m[s] == -INFINITY ? 0.0f : expf(m[s] - M);
            L += m[s] == -INFINITY ? 0.0f : l[s] * f[s];
        }
        inv_total = 1.0f / L;
    }
    __syncthreads();
    float* out = p.out + head_row * p.d;
    for (int c = threadIdx.x; c < p.d; c += blockDim.x) {
        float v = 0;
        for (int s = 0; s < p.splits; ++s)
            if (f[s] != 0.0f) v += __ldcg(part + s * (2 + p.d) + 2 + c) * f[s];
        out[c] = v * inv_total;
    }
    const MergeEpilogue& epi = p.epi;
    if (epi.positions == nullptr) return;
    __syncthreads();  // rope pairs are read by other threads than the ones that wrote them
    rope_pairs(out, p.d, epi.positions[head_row / p.heads], epi.inv_freq, epi.rope_dim, epi.rope_scale, true, threadIdx.x,
               blockDim.x);
}

// Prepare: the query preparation is compiled in only where it is used (split steps).
template <bool Prepare>
__global__ void attention_kernel(AttnParams p) {
    pdl_prologue();
    int row = blockIdx.x / p.heads, h = blockIdx.x % p.heads;
    int si = seq_of(p.seqs, p.num_seqs, row);
    bool split = p.partial != nullptr;
    if (si >= 0)
        attend<Prepare>(p, row, h, si);
    else if (split && threadIdx.x == 0)  // a row outside every sequence: its merge writes zeros
        p.partial[(static_cast<long long>(blockIdx.x) * p.splits + blockIdx.y) * (2 + p.d)] = -INFINITY;
    if (!split) return;
    // The last of a head's split blocks merges them; the grid's last block (every block has read
    // the rings by then) stores the step's keys.
    if (last_to_arrive(p.arrivals + blockIdx.x, gridDim.y)) merge_head(p, blockIdx.x);
    if (p.epi.positions == nullptr || !last_to_arrive(p.arrivals + gridDim.x, gridDim.x * gridDim.y)) return;
    for (int r = 0; r < static_cast<int>(gridDim.x) / p.heads; ++r)
        store_ring_row(p.epi.seqs, p.epi.num_seqs, p.epi.kv, p.epi.ring, p.epi.slots, p.d, r);
}

__global__ void ring_write_kernel(const DeviceSeq* seqs, int num_seqs, const float* kv, float* ring, int slots, int d) {
    pdl_prologue();
    store_ring_row(seqs, num_seqs, kv, ring, slots, d, blockIdx.x);
}

int total_tokens(std::span<const SeqSlice> seqs) {
    int n = 0;
    for (const auto& s : seqs) n = std::max(n, s.token_begin + s.num_tokens);
    return n;
}

}  // namespace

void CudaBackend::attention(std::span<const SeqSlice> seqs, const AttentionArgs& a) {
    DI_CUDA_OP("attention");
    launch_attention(seqs, a, nullptr, nullptr);
}

void CudaBackend::attend_and_store(std::span<const SeqSlice> seqs, const AttentionArgs& a, const Tensor& positions,
                                   const Rope& out_rope, const QueryPrep& q_prep) {
    DI_CUDA_OP("attend_and_store");
    if (launch_attention(seqs, a, &positions, &out_rope, q_prep)) return;
    Tensor ring = a.ring, o = a.out.reshape({a.out.dim(0) * a.out.dim(1), a.out.dim(2)});
    ring_write(seqs, a.kv, ring);
    rope(o, positions, static_cast<int>(a.out.dim(1)), out_rope, true);
}

bool CudaBackend::launch_attention(std::span<const SeqSlice> seqs, const AttentionArgs& a, const Tensor* positions,
                                   const Rope* out_rope, const QueryPrep& q_prep) {
    int heads = static_cast<int>(a.q.dim(1)), d = static_cast<int>(a.q.dim(2));
    DI_CUDA_REQUIRE(d <= kMaxPerLane * 32, "cuda attention: head_dim " + std::to_string(d) + " is above 512");
    DI_CUDA_REQUIRE(a.ring.dim(1) >= a.window - 1, "attention: ring shorter than the window");
    int n = total_tokens(seqs);
    if (n == 0) return true;
    bool comp = a.compressed != AttentionArgs::Compressed::kNone;
    // Small steps (decode) give too few (token, head) blocks to fill the GPU: split each one's keys
    // over up to kMaxSplits blocks of at least kMinSplitKeys keys (so at most sm_count_ blocks are
    // split, within the arrival counters).
    constexpr int kMinSplitKeys = 64;
    long long max_keys = a.window;
    if (a.compressed == AttentionArgs::Compressed::kSelected) max_keys += a.selected.dim(1);
    if (a.compressed == AttentionArgs::Compressed::kAllVisible)
        for (const auto& s : seqs) max_keys = std::max<long long>(max_keys, a.window + (s.start_pos + s.num_tokens) / a.rate);
    int blocks = n * heads;
    long long by_keys = std::max(1LL, max_keys / kMinSplitKeys);
    int splits = static_cast<int>(std::min<long long>(std::min(kMaxSplits, std::max(1, 2 * sm_count_ / blocks)), by_keys));
    // The query preparation rides the split kernel (a few blocks per head, no launch for it); a
    // step of whole-block heads normalises and ropes them in one pass first, instead of in each
    // of a block's warps.
    QueryPrep prep = q_prep;
    if (splits == 1 && (prep.norm || prep.rope != nullptr)) {
        Tensor q = a.q.reshape({a.q.dim(0) * heads, d});
        NormRopeJob job{&q, prep.norm, nullptr, prep.eps, prep.rope, heads};
        norm_rope_many({&job, 1}, *positions);
        prep = {};
    }
    auto [dseqs, tables] = upload_seqs(seqs, comp ? a.entries : nullptr);
    Tensor partial = splits > 1 ? empty(DType::kF32, {blocks, splits, 2 + d}) : Tensor();
    MergeEpilogue epi;
    if (splits > 1 && positions != nullptr)
        epi = {positions->data<long long>(), out_rope->inv_freq.data<float>(), out_rope->rope_dim, out_rope->scale, dseqs,
               static_cast<int>(seqs.size()), a.kv.data<float>(), a.ring.data<float>(),
               static_cast<int>(a.ring.dim(1))};
    AttnParams p{a.q.data<float>(), a.kv.data<float>(), a.ring.data<float>(), comp ? a.entries->pool.data<float>() : nullptr,
                 a.compressed == AttentionArgs::Compressed::kSelected ? a.selected.data<int>() : nullptr, dseqs, tables,
                 a.sinks.data<float>(), a.out.data<float>(), splits > 1 ? partial.data<float>() : nullptr,
                 static_cast<int>(seqs.size()), heads, d, static_cast<int>(a.ring.dim(1)), a.window,
                 static_cast<int>(a.compressed), a.rate,
                 a.compressed == AttentionArgs::Compressed::kSelected ? static_cast<int>(a.selected.dim(1)) : 0,
                 comp ? static_cast<int>(a.entries->pool.dim(1)) : 1, splits, a.scale, prep.norm, prep.eps,
                 prep.rope ? prep.rope->inv_freq.data<float>() : nullptr, prep.rope ? prep.rope->rope_dim : 0,
                 prep.rope ? prep.rope->scale : 1.0f, attn_arrivals_.data<int>(), epi};
    bool prepare = prep.norm || prep.rope != nullptr;
    launch_pdl(prepare ? attention_kernel<true> : attention_kernel<false>, dim3(blocks, splits), 32 * kWarps, 0, stream(), p);
    return splits > 1 || positions == nullptr;
}

void CudaBackend::ring_write(std::span<const SeqSlice> seqs, const Tensor& kv, Tensor& ring) {
    DI_CUDA_OP("ring_write");
    int n = total_tokens(seqs);
    if (n == 0) return;
    auto [dseqs, tables] = upload_seqs(seqs, nullptr);
    (void)tables;
    launch_pdl(ring_write_kernel, n, 128, 0, stream(), dseqs, static_cast<int>(seqs.size()), kv.data<float>(),
               ring.data<float>(), static_cast<int>(ring.dim(1)), static_cast<int>(ring.dim(2)));
}

}  // namespace deepinfer::kernels::cuda
