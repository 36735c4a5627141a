// Attention with sinks over the sliding window (ring + this step's new tokens) and compressed
// entries (all visible, or the indexer's picks). Steps of many (token, head) pairs (prefill,
// large batches) go to attention_tiled.cu (a block per token and group of heads, keys staged in
// shared memory; deterministic mode's kernel for every step size). This file's kernel takes one
// block per (token, head): DSpark's block attention, and what the tiled kernel does not fit.
// Each warp walks its keys kKeysPerStep at a time (independent loads and reductions in flight)
// with an online softmax, then the warps' partial results are merged. Steps of a few tokens go
// to attention_decode.cu.
#include <algorithm>

#include "kernels/cuda/attention_common.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using attn::AttnParams;

constexpr int kWarps = 8;
constexpr int kKeysPerStep = 4;
constexpr int kMaxPerLane = 16;  // head_dim <= 512

// Block (row, head)'s attention output.
// Keys: the window, then compressed entries; for kSelected only the valid (>= 0) picks, which the
// indexer packs first (attn::token_keys).
__device__ void attend(const AttnParams& p, int row, int h, const attn::TokenKeys& tk) {
    int total = tk.total;

    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float* q = p.q + (static_cast<long long>(row) * p.heads + h) * p.d;
    float qr[kMaxPerLane], acc[kMaxPerLane];  // indexed by constants only, so they stay in registers
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
        int c = lane + 32 * j;
        qr[j] = c < p.d ? q[c] : 0.0f;
        acc[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int i0 = warp * kKeysPerStep; i0 < total; i0 += kWarps * kKeysPerStep) {
        const float* k[kKeysPerStep];
        float logit[kKeysPerStep];
        for (int u = 0; u < kKeysPerStep; ++u) {
            k[u] = i0 + u < total ? attn::key_of(p, tk, i0 + u) : nullptr;
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
    // Merge the warps, add the sink and normalise.
    float sink = p.sinks[h], M = sink;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm[w]);
    float L = expf(sink - M);
    for (int w = 0; w < kWarps; ++w) L += sm[w] == -INFINITY ? 0.0f : sl[w] * expf(sm[w] - M);
    float* out = p.out + (static_cast<long long>(row) * p.heads + h) * p.d;
    for (int c = threadIdx.x; c < p.d; c += blockDim.x) {
        float v = 0;
        for (int w = 0; w < kWarps; ++w)
            if (sm[w] != -INFINITY) v += sacc[w][c] * expf(sm[w] - M);
        out[c] = v / L;
    }
}

__global__ void attention_kernel(AttnParams p) {
    pdl_prologue();
    int row = blockIdx.x / p.heads, h = blockIdx.x % p.heads;
    attn::TokenKeys tk;
    if (attn::token_keys(p, row, tk)) attend(p, row, h, tk);
}

__global__ void ring_write_kernel(const DeviceSeq* seqs, int num_seqs, const float* kv, float* ring, int slots, int d) {
    pdl_prologue();
    attn::store_ring_row(seqs, num_seqs, kv, ring, slots, d, blockIdx.x);
}

int total_tokens(std::span<const SeqSlice> seqs) {
    int n = 0;
    for (const auto& s : seqs) n = std::max(n, s.token_begin + s.num_tokens);
    return n;
}

}  // namespace

AttentionFamily::AttentionFamily(CudaBackend& device) : dev_(device) {
    arrivals_ = dev_.zeros(DType::kI32, {dev_.sm_count() + 1});
}

void AttentionFamily::attention(std::span<const SeqSlice> seqs, const AttentionArgs& a) { launch(seqs, a, nullptr, nullptr); }

void AttentionFamily::attend_and_store(std::span<const SeqSlice> seqs, const AttentionArgs& a, const Tensor& positions,
                                       const Rope& out_rope, const QueryPrep& q_prep) {
    if (launch(seqs, a, &positions, &out_rope, q_prep)) return;
    Tensor ring = a.ring, o = a.out.reshape({a.out.dim(0) * a.out.dim(1), a.out.dim(2)});
    dev_.ring_write(seqs, a.kv, ring);
    dev_.rope(o, positions, static_cast<int>(a.out.dim(1)), out_rope, true);
}

bool AttentionFamily::launch(std::span<const SeqSlice> seqs, const AttentionArgs& a, const Tensor* positions,
                             const Rope* out_rope, const QueryPrep& q_prep) {
    int heads = static_cast<int>(a.q.dim(1)), d = static_cast<int>(a.q.dim(2));
    DI_CUDA_REQUIRE(d <= kMaxPerLane * 32, "cuda attention: head_dim " + std::to_string(d) + " is above 512");
    DI_CUDA_REQUIRE(a.ring.dim(1) >= a.window - 1, "attention: ring shorter than the window");
    int n = total_tokens(seqs);
    if (n == 0) return true;
    // Too few (token, head) blocks to fill the GPU: the decode kernel splits the keys over blocks.
    if (!dev_.invariant() && n * heads < 2 * dev_.sm_count() && launch_decode(seqs, a, positions, out_rope, q_prep))
        return true;
    if (q_prep.norm || q_prep.rope != nullptr) {  // normalise and rope every query head in one pass first
        Tensor q = a.q.reshape({a.q.dim(0) * heads, d});
        NormRopeJob job{&q, q_prep.norm, nullptr, q_prep.eps, q_prep.rope, heads};
        dev_.norm_rope_many({&job, 1}, *positions);
    }
    bool comp = a.compressed != AttentionArgs::Compressed::kNone;
    auto [dseqs, tables] = dev_.upload_seqs(seqs, comp ? a.entries : nullptr);
    AttnParams p = attn::step_params(a, dseqs, tables, static_cast<int>(seqs.size()));
    if (!launch_mma(p, n) && !launch_tiled(p, n)) launch_pdl(attention_kernel, n * heads, 32 * kWarps, 0, dev_.stream(), p);
    return positions == nullptr;
}

void AttentionFamily::block_attention(std::span<const SeqSlice> seqs, const BlockAttentionArgs& a) {
    int heads = static_cast<int>(a.q.dim(1)), d = static_cast<int>(a.q.dim(2));
    DI_CUDA_REQUIRE(d <= kMaxPerLane * 32, "cuda block attention: head_dim " + std::to_string(d) + " is above 512");
    DI_CUDA_REQUIRE(a.ring.dtype() == DType::kF32, "cuda block attention: the ring must be fp32");
    for (const SeqSlice& s : seqs)
        DI_CUDA_REQUIRE(s.start_pos - s.window_from <= a.ring.dim(1), "cuda block attention: context longer than the ring");
    int n = total_tokens(seqs);
    if (n == 0) return;
    auto [dseqs, tables] = dev_.upload_seqs(seqs, nullptr);
    AttnParams p{a.q.data<float>(), a.kv.data<float>(), a.ring.data<float>(), nullptr, nullptr, dseqs, tables,
                 a.sinks.data<float>(), a.out.data<float>(), static_cast<int>(seqs.size()), heads, d,
                 static_cast<int>(a.ring.dim(1)), 0, attn::kBlockMode, 1, 0, 1, a.scale};
    launch_pdl(attention_kernel, n * heads, 32 * kWarps, 0, dev_.stream(), p);
}

void AttentionFamily::ring_write(std::span<const SeqSlice> seqs, const Tensor& kv, Tensor& ring) {
    int n = total_tokens(seqs);
    if (n == 0) return;
    auto [dseqs, tables] = dev_.upload_seqs(seqs, nullptr);
    (void)tables;
    launch_pdl(ring_write_kernel, n, 128, 0, dev_.stream(), dseqs, static_cast<int>(seqs.size()), kv.data<float>(),
               ring.data<float>(), static_cast<int>(ring.dim(1)), static_cast<int>(ring.dim(2)));
}

// The backend's ops: one each, timed and recorded as such.
void CudaBackend::attention(std::span<const SeqSlice> seqs, const AttentionArgs& a) {
    DI_CUDA_OP("attention");
    attention_->attention(seqs, a);
}

void CudaBackend::attend_and_store(std::span<const SeqSlice> seqs, const AttentionArgs& a, const Tensor& positions,
                                   const Rope& out_rope, const QueryPrep& q_prep) {
    DI_CUDA_OP("attend_and_store");
    attention_->attend_and_store(seqs, a, positions, out_rope, q_prep);
}

void CudaBackend::block_attention(std::span<const SeqSlice> seqs, const BlockAttentionArgs& a) {
    DI_CUDA_OP("block_attention");
    attention_->block_attention(seqs, a);
}

void CudaBackend::ring_write(std::span<const SeqSlice> seqs, const Tensor& kv, Tensor& ring) {
    DI_CUDA_OP("ring_write");
    attention_->ring_write(seqs, kv, ring);
}

}  // namespace deepinfer::kernels::cuda
