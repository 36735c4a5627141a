#pragma once
// The CPU implementation of kernels::Backend: host memory, a thread pool, and SIMD GEMMs picked
// by the detected (or forced) instruction set. Op bodies are split by family over cpu_*.cc.
#include "base/cpu_features.h"
#include "base/host_allocator.h"
#include "base/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"

namespace deepinfer::kernels::cpu {

class CpuBackend final : public Backend {
public:
    CpuBackend(int num_threads, Isa isa);

    Device device() const override { return Device::kCpu; }
    const char* name() const override { return "cpu"; }
    // Products split over weight rows (never over k), attention and norms per token: batch-invariant.
    // kBf16 rounds the activations of products with bf16 weights to bf16 (gemm_bf16.h); the
    // other precisions compute in fp32.
    Execution& execution() override { return exec_; }
    const Execution& execution() const override { return exec_; }
    Isa isa() const { return isa_; }
    ThreadPool& pool() { return pool_; }
    // The AVX-512 kernels decode MXFP4 in registers; other ISAs (and the scalar references) get them widened.
    bool reads_mxfp4() const override { return isa_ == Isa::kAvx512; }
    bool reads_fp8() const override { return isa_ == Isa::kAvx512; }
    bool reads_bf16_cache() const override { return true; }

    Tensor empty(DType dtype, std::vector<int64_t> shape) override;
    Tensor zeros(DType dtype, std::vector<int64_t> shape) override;
    Tensor upload(const Tensor& host) override;
    void download(const Tensor& src, void* host_dst) override;

    void embed(const Tensor& ids, const Tensor& table, int hc, Tensor& out) override;
    void matmul(const Tensor& x, const Tensor& w, Tensor& y) override;
    void matmul_many(const Tensor& x, std::span<const MatmulTarget> targets) override;
    void norm_rope_many(std::span<const NormRopeJob> jobs, const Tensor& positions) override;
    void grouped_matmul(const Tensor& x, const Tensor& w, int groups, Tensor& y) override;
    void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& y) override;
    void rope(Tensor& x, const Tensor& positions, int group, const Rope& rope, bool inverse) override;
    void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) override;
    void add(const Tensor& x, Tensor& y) override;
    void copy(const Tensor& src, Tensor& dst) override;
    void argmax_rows(const Tensor& logits, Tensor& ids) override;
    void sample_rows(const SampleArgs& args) override;
    void reset_penalties(Tensor& state, int32_t slot, std::span<const int32_t> prompt,
                         std::span<const int32_t> output) override;
    void apply_token_mask(Tensor& logits, const Tensor& rows, const Tensor& mask) override;
    void swiglu(const Tensor& gate, const Tensor& up, float limit, Tensor& out) override;

    void hc_pre(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                Tensor& collapsed, Tensor& post, Tensor& comb) override;
    void hc_post(Tensor& streams, const Tensor& y, const Tensor& post, const Tensor& comb) override;
    void hc_mix(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                Tensor& pre, Tensor& post, Tensor& comb) override;
    void hc_collapse(const Tensor& streams, const Tensor& pre, Tensor& out) override;
    void engram_gate(Tensor& streams, const Tensor& kv, const Tensor& weight, float eps) override;
    void hc_head(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                 Tensor& out) override;

    void attention(std::span<const SeqSlice> seqs, const AttentionArgs& args) override;
    void block_attention(std::span<const SeqSlice> seqs, const BlockAttentionArgs& args) override;
    void ring_write(std::span<const SeqSlice> seqs, const Tensor& kv, Tensor& ring) override;
    void compressor_update(std::span<const SeqSlice> seqs, const CompressorArgs& args) override;
    void indexer_topk(std::span<const SeqSlice> seqs, const IndexerArgs& args) override;
    void pool_groups(std::span<const SeqSlice> seqs, const PoolArgs& args) override;
    void store_entries(std::span<const EntrySlot> slots, const Tensor& rows, const EntryStore& store) override;
    void fake_quantize(Tensor& x, QuantFormat format) override;

    void moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids, int top_k,
                   float scaling, Tensor& ids, Tensor& weights) override;
    void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                     float limit, Tensor& out) override;

    // y[m, n] = x[m, k] · w[n, k]ᵀ on raw fp32 rows, over the pool (w fp32, bf16 or Q8).
    void gemm(const float* x, int64_t lda, const Tensor& w, float* y, int64_t ldy, int64_t m, bool accumulate = false);

private:
    void mix_coefficients(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                          const MhcParams& p, float* pre, Tensor& post, Tensor& comb);

    ThreadPool pool_;
    Isa isa_;
    std::shared_ptr<HostAllocator> allocator_ = HostAllocator::create();  // activations of every step
    HostArena weights_;                                                    // uploads (weights, tables)
    HostExecution exec_;
    bool bf16_activations() const { return exec_.matmul_precision() == MatmulPrecision::kBf16; }
    bool int8_activations() const { return exec_.int8_activations(); }
    std::vector<uint8_t> q8_scratch_;  // activations quantized or rounded for the kernels (gemm runs one at a time)
    struct MoeScratch {
        std::vector<float> tokens, gate, up, out;
    } moe_scratch_;  // moe_experts' per-expert blocks
};

std::unique_ptr<Backend> make_cpu_backend(int num_threads, Isa isa);

}  // namespace deepinfer::kernels::cpu
