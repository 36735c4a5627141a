#pragma once
// The CUDA backend's attention family: the ops attention, attend_and_store, block_attention and
// ring_write, the choice among their kernels and the kernels' own state. Kernels: split-key
// decode (attention_decode.cu) for steps of a few tokens, which prepares the queries in registers
// and, for attend_and_store, stores the step's keys and de-ropes the output in its merge; for
// other steps a norm/rope pass, then in the fast precision the tensor-core kernel
// (attention_mma.cu), else the tiled kernel (attention_tiled.cu) or, where neither fits, a block
// per (token, head) (attention.cu).
#include <span>

#include "kernels/backend.h"

namespace deepinfer::kernels::cuda {

class CudaBackend;
namespace attn {
struct AttnParams;  // attention_common.cuh
}

class AttentionFamily {
public:
    // `device` gives the stream, memory, metadata uploads, knobs and the norm / rope ops.
    explicit AttentionFamily(CudaBackend& device);

    void attention(std::span<const SeqSlice> seqs, const AttentionArgs& a);
    void attend_and_store(std::span<const SeqSlice> seqs, const AttentionArgs& a, const Tensor& positions,
                          const Rope& out_rope, const QueryPrep& q_prep);
    void block_attention(std::span<const SeqSlice> seqs, const BlockAttentionArgs& a);
    void ring_write(std::span<const SeqSlice> seqs, const Tensor& kv, Tensor& ring);

private:
    // Returns whether the keys were stored and the output de-roped (or nothing was to do).
    bool launch(std::span<const SeqSlice> seqs, const AttentionArgs& a, const Tensor* positions, const Rope* out_rope,
                const QueryPrep& q_prep = {});
    // attention_decode.cu; false when the step does not fit it (head_dim not a multiple of 4 or
    // above 512, more (token, head group) pairs than SMs) or the knob is off.
    bool launch_decode(std::span<const SeqSlice> seqs, const AttentionArgs& a, const Tensor* positions,
                       const Rope* out_rope, const QueryPrep& q_prep);
    // attention_tiled.cu (a block per token and head group, keys staged in shared memory); false
    // when the step does not fit it (head_dim not a multiple of 4 or above 512, DSpark blocks) or
    // the knob is off.
    bool launch_tiled(const attn::AttnParams& p, int tokens);
    // attention_mma.cu (bf16 queries and keys on tensor cores); false outside the fast precision,
    // in deterministic mode, for DSpark blocks, heads not a multiple of 32, head_dim not a
    // multiple of 64 or above 512, or with the knob off.
    bool launch_mma(const attn::AttnParams& p, int tokens);

    CudaBackend& dev_;
    Tensor arrivals_;            // [SMs + 1] int32 split-decode counters, zero between launches
    size_t tiled_smem_ = 0;      // dynamic shared memory the tiled kernel may use
    size_t mma_smem_ = 0;        // and the tensor-core one
};

}  // namespace deepinfer::kernels::cuda
