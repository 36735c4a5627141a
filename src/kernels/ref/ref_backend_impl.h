#pragma once
// Declaration of the reference backend (definitions in ref_*.cc).
#include "kernels/backend.h"

namespace deepinfer::kernels::ref {

double weight_value(const Tensor& w, int64_t i);

class RefBackend final : public Backend {
public:
    Device device() const override { return Device::kCpu; }
    const char* name() const override { return "reference"; }
    // One row at a time: batch-invariant; every precision computes in fp64 / fp32.
    Execution& execution() override { return exec_; }
    const Execution& execution() const override { return exec_; }

    Tensor empty(DType dtype, std::vector<int64_t> shape) override;
    Tensor zeros(DType dtype, std::vector<int64_t> shape) override;
    Tensor upload(const Tensor& host) override;
    void download(const Tensor& src, void* host_dst) override;

    void embed(const Tensor& ids, const Tensor& table, int hc, Tensor& out) override;
    void matmul(const Tensor& x, const Tensor& w, Tensor& y) override;
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

private:
    HostExecution exec_;
};

}  // namespace deepinfer::kernels::ref
