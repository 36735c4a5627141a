#pragma once
// The CUDA backend's MoE family: the ops moe_route, moe_experts and moe_ffn, the choice among
// their kernels by step size and precision, and their state (the experts' row tables on the
// device, the staged kernels' shared-memory settings, whether cuBLAS has grouped GEMMs).
// Kernels: per (token, slot) pair for small steps (moe.cu); grouped by expert on the device
// (moe_grouped.cu; in the fast precision staged through shared memory, moe_staged.cu); grouped
// cuBLAS GEMMs over the host's grouping for long steps (moe_gemm.cu); det_gemm.cu's grouped
// products in deterministic mode.
#include <cuda_bf16.h>

#include <map>
#include <span>
#include <vector>

#include "kernels/backend.h"

namespace deepinfer::kernels::cuda {

class CudaBackend;

// One routed expert's bf16 matrices, as the device-side MoE kernels index them.
struct ExpertRows {
    const __nv_bfloat16* w1;
    const __nv_bfloat16* w3;
    const __nv_bfloat16* w2;
};

class MoeFamily {
public:
    // `device` gives the stream, memory, knobs, the products (gemm, det_gemm) and swiglu.
    explicit MoeFamily(CudaBackend& device) : dev_(device) {}

    void moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids, int top_k,
                   float scaling, Tensor& ids, Tensor& weights);
    void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                     float limit, Tensor& out);
    void moe_ffn(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                 const ExpertWeights& shared, float limit, Tensor& out);

private:
    const ExpertRows* expert_rows(std::span<const ExpertWeights> experts);
    // GEMMs y = w · b per expert (column-major view: n_out x rows, k deep; w bf16 [n_out, k] row-major,
    // b bf16 [rows, k], c fp32 [rows, n_out]), as one grouped call where cuBLAS has one.
    struct ExpertGemm {
        const void* w;
        const void* b;
        float* c;
        int n_out, rows, k;
    };
    void expert_gemms(const std::vector<ExpertGemm>& list);
    // (token, slot) pairs grouped by expert on the host: each expert's tokens ascending, a token
    // routed twice to one expert (hash routing) once, with the weights added.
    struct ExpertTokens {
        std::vector<std::vector<int>> tokens;
        std::vector<std::vector<float>> weights;
    };
    void moe_experts_gemm(const Tensor& x, const ExpertTokens& by_expert, int top_k, std::span<const ExpertWeights> experts,
                          float limit, Tensor& out);
    // Steps of up to kMaxPerPairs (token, slot) pairs run the experts straight from the device ids.
    static constexpr int64_t kMaxPerPairs = 64;
    void moe_per_pair(const Tensor& x, const Tensor& ids, const Tensor& weights, const ExpertRows* rows, ExpertRows shared,
                      int inter, float limit, Tensor& out);
    void moe_experts_grouped(const Tensor& x, const Tensor& ids, const Tensor& weights, const ExpertRows* rows, int experts,
                             int inter, float limit, Tensor& out);
    // moe_staged.cu: the grouped experts' up and down products in the fast precision with the
    // weights staged through shared memory (knob moe_staged); xb: [pairs' tokens, d] bf16,
    // hb: [pairs, inter] bf16 scratch, y: [pairs, d] weighted per pair.
    void launch_moe_staged(const __nv_bfloat16* xb, int d, const int* order, const int* offsets, const ExpertRows* rows,
                           int experts, int pairs, int top_k, int inter, float limit, __nv_bfloat16* hb,
                           const float* weights, float* y);
    // Deterministic mode's routed experts (det_gemm.cu's grouped products): pairs grouped by
    // expert on the device, every pair its own row, slots added in slot order.
    void moe_experts_invariant(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                               float limit, Tensor& out);

    CudaBackend& dev_;
    bool grouped_gemm_ok_ = true;   // cleared when cuBLAS reports no grouped GEMM for bf16 -> fp32
    bool staged_smem_set_[2] = {};  // the staged kernels (64 / 128 pairs a pass) may use their shared memory
    struct ExpertRowTable {
        std::vector<ExpertRows> host;
        Tensor device;
    };
    std::map<const ExpertWeights*, ExpertRowTable> expert_rows_;  // per MoE layer
};

}  // namespace deepinfer::kernels::cuda
