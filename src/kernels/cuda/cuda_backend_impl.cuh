#pragma once
// The CUDA implementation of kernels::Backend. One stream; every op is enqueued on it and
// download() synchronises. Host-side metadata of an op (sequence slices, block tables) is packed
// into one small buffer and copied to the device per call. Device memory comes from a caching
// allocator (freed blocks are reused by size class), so steady-state steps do not cudaMalloc.
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/graph_recorder.cuh"
#include "kernels/cuda/op_profiler.cuh"

// Marks the enclosing function as one backend op: recorded into the step's graph segment when a
// graph step is open (see GraphRecorder), timed when profiling is on (see OpProfiler).
#define DI_CUDA_OP(name)                                                        \
    ::deepinfer::kernels::cuda::GraphOpScope graph_scope__(graphs_.get()); \
    ::deepinfer::kernels::cuda::OpProfiler::Scope op_scope__(&profiler_, name, stream_)

namespace deepinfer::kernels::cuda {

class DeviceAllocator : public std::enable_shared_from_this<DeviceAllocator> {
public:
    static std::shared_ptr<DeviceAllocator> create() { return std::shared_ptr<DeviceAllocator>(new DeviceAllocator()); }
    ~DeviceAllocator();
    std::shared_ptr<void> allocate(size_t bytes);

private:
    DeviceAllocator() = default;
    std::mutex mutex_;
    std::map<size_t, std::vector<void*>> free_;
};

// One routed expert's bf16 matrices, as the device-side MoE kernels index them.
struct ExpertRows {
    const __nv_bfloat16* w1;
    const __nv_bfloat16* w3;
    const __nv_bfloat16* w2;
};

// Per-sequence metadata as the kernels read it.
struct DeviceSeq {
    int token_begin, num_tokens;
    long long start_pos;
    int state_idx;
    int table_offset;  // into the op's flat block-table array
    long long window_from;
};

struct HcPreArgs;  // mhc.cu
namespace attn {
struct AttnParams;  // attention_common.cuh
}
namespace indexer {
struct IndexParams;  // indexer_common.cuh
}

// The RMSNorm hc_pre_norm folds into the collapse (weight null: none).
struct CollapseNorm {
    const float* weight = nullptr;
    float eps = 0.0f;
};

class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int device);
    ~CudaBackend() override;

    Device device() const override { return Device::kCuda; }
    const char* name() const override { return "cuda"; }
    // Deterministic mode: every op takes one path whatever the batch (det_gemm.cu for products,
    // the tiled attention kernel, scored indexer picks, the GEMM form of the mHC mixes, the
    // device-grouped experts); see docs/architecture.md.
    bool batch_invariant() const override { return invariant_; }
    bool set_batch_invariant(bool on) override {
        invariant_ = on;
        return true;
    }

    Tensor empty(DType dtype, std::vector<int64_t> shape) override;
    Tensor zeros(DType dtype, std::vector<int64_t> shape) override;
    Tensor upload(const Tensor& host) override;
    void download(const Tensor& src, void* host_dst) override;
    // Prefix-cache copies on a side stream (cuda_transfers.cu).
    Tensor host_buffer(int64_t bytes) override;
    void transfer_to_host(std::span<const HostTransfer> copies) override;
    void transfer_to_device(std::span<const HostTransfer> copies) override;
    void sync_transfers() override;

    void embed(const Tensor& ids, const Tensor& table, int hc, Tensor& out) override;
    void matmul(const Tensor& x, const Tensor& w, Tensor& y) override;
    void matmul_many(const Tensor& x, std::span<const MatmulTarget> targets) override;
    void grouped_matmul(const Tensor& x, const Tensor& w, int groups, Tensor& y) override;
    void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& y) override;
    void rope(Tensor& x, const Tensor& positions, int group, const Rope& rope, bool inverse) override;
    void rms_norm_rope(Tensor& x, const Tensor* weight, float eps, const Tensor& positions, int group,
                       const Rope& r) override;
    void norm_rope_many(std::span<const NormRopeJob> jobs, const Tensor& positions) override;
    void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) override;
    void add(const Tensor& x, Tensor& y) override;
    void copy(const Tensor& src, Tensor& dst) override;
    void argmax_rows(const Tensor& logits, Tensor& ids) override;
    // sampling.cu
    void sample_rows(const SampleArgs& args) override;
    void reset_penalties(Tensor& state, int32_t slot, std::span<const int32_t> prompt,
                         std::span<const int32_t> output) override;
    void apply_token_mask(Tensor& logits, const Tensor& rows, const Tensor& mask) override;
    void synchronize() override;
    void swiglu(const Tensor& gate, const Tensor& up, float limit, Tensor& out) override;

    void hc_pre(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                Tensor& collapsed, Tensor& post, Tensor& comb) override;
    void hc_pre_norm(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                     const Tensor& norm_weight, float eps, Tensor& collapsed, Tensor& post, Tensor& comb) override;
    void hc_post(Tensor& streams, const Tensor& y, const Tensor& post, const Tensor& comb) override;
    void hc_post_pre_norm(Tensor& streams, const Tensor& y, Tensor& post, Tensor& comb, const Tensor& fn, const Tensor& base,
                          const Tensor& scale, const MhcParams& p, const Tensor& norm_weight, float eps,
                          Tensor& collapsed) override;
    void hc_mix(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                Tensor& pre, Tensor& post, Tensor& comb) override;
    void hc_collapse(const Tensor& streams, const Tensor& pre, Tensor& out) override;
    void engram_gate(Tensor& streams, const Tensor& kv, const Tensor& weight, float eps) override;
    void hc_head(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                 Tensor& out) override;

    void attention(std::span<const SeqSlice> seqs, const AttentionArgs& args) override;
    void block_attention(std::span<const SeqSlice> seqs, const BlockAttentionArgs& args) override;
    void ring_write(std::span<const SeqSlice> seqs, const Tensor& kv, Tensor& ring) override;
    void attend_and_store(std::span<const SeqSlice> seqs, const AttentionArgs& args, const Tensor& positions,
                          const Rope& out_rope, const QueryPrep& q_prep) override;
    void compressor_update(std::span<const SeqSlice> seqs, const CompressorArgs& args) override;
    void indexer_topk(std::span<const SeqSlice> seqs, const IndexerArgs& args) override;
    void pool_groups(std::span<const SeqSlice> seqs, const PoolArgs& args) override;
    void store_entries(std::span<const EntrySlot> slots, const Tensor& rows, const EntryStore& store) override;
    void fake_quantize(Tensor& x, QuantFormat format) override;

    void moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids, int top_k,
                   float scaling, Tensor& ids, Tensor& weights) override;
    void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                     float limit, Tensor& out) override;
    void moe_ffn(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                 const ExpertWeights& shared, float limit, Tensor& out) override;

    // y[m, n] (+)= x[m, k] · w[n, k]ᵀ with row strides, x fp32 on the device, w bf16 or fp32.
    void gemm(const float* x, int64_t lda, const Tensor& w, float* y, int64_t ldy, int64_t m, bool accumulate = false);
    // Products y = x · wᵀ of m <= kGemvMaxRows rows of x (row stride lda) and bf16 weights, all
    // in one launch at full fp32 accuracy (the groups of a grouped matmul, or sibling projections).
    // Returns false (nothing launched) when the shapes or alignment do not suit it.
    struct GemvProduct {
        const float* x;
        const Tensor* w;
        float* y;
        int64_t ldy;
    };
    static constexpr int64_t kGemvMaxRows = 8;
    // Steps of up to this many tokens compute the mHC mixes split over blocks, in one launch.
    static constexpr int64_t kMaxHcSplitTokens = 64;
    bool gemv(std::span<const GemvProduct> products, int64_t lda, int64_t m, bool accumulate);
    // A batch-invariant product (det_gemm.cu) of bf16 activation parts (part p of row r at
    // a + p * part_stride + r * lda) and bf16 weights [n, k]: dense over m rows, or grouped by
    // expert (see DetArgs there).
    struct DetProduct {
        const __nv_bfloat16* a;
        int64_t lda, part_stride;
        int parts;
        int64_t m;
        const __nv_bfloat16* w;  // dense
        int64_t n, k;
        float* c;
        int64_t ldc;
        bool accumulate = false;
        const int* order = nullptr;  // grouped
        const int* offsets = nullptr;
        int row_div = 1, groups = 1, which = 0;
        int products = 1;  // dense: products side by side, product z's a, w and c offset by z times these
        int64_t z_a = 0, z_w = 0, z_c = 0;
        const ExpertRows* experts = nullptr;
        bool weights_aligned = true;
    };
    void launch_det_gemm(const DetProduct& p);
    void det_gemm_f32(const float* x, int64_t lda, const Tensor& w, float* y, int64_t ldy, int64_t m, bool accumulate);
    // x's rows as `gemm_parts_` bf16 parts, part-major ([parts, m, k]).
    Tensor split_parts(const float* x, int64_t lda, int64_t m, int64_t k);
    static bool all_bf16_weights(std::span<const MatmulTarget> targets);
    cudaStream_t stream() const { return stream_; }
    void set_matmul_precision(MatmulPrecision p) override {
        gemm_parts_ = p == MatmulPrecision::kFp32 ? 3 : p == MatmulPrecision::kBf16x2 ? 2 : 1;
    }
    void set_profiling(bool on) override { profiler_.enable(on); }
    // Graph steps are skipped while profiling (the per-op events would land inside the graphs).
    void begin_graph_step(uint64_t shape) override {  // the mode's kernels differ: graphs of their own
        if (!profiler_.enabled()) graphs_->begin_step(invariant_ ? shape ^ (uint64_t{1} << 63) : shape);
    }
    void end_graph_step(bool launch) override { graphs_->end_step(launch); }
    void set_graphs(bool on) override { graphs_->set_enabled(on); }
    // See KernelVariants.
    bool set_variant(const std::string& name, int value) override;
    void reset_variants() override;
    std::string profile_report() override;

    // Sequence slices (+ their block tables, when given) as a device array of DeviceSeq, and the
    // flat tables after it. Returns {seqs, tables}; valid for the next few calls on this stream.
    std::pair<const DeviceSeq*, const int*> upload_seqs(std::span<const SeqSlice> seqs, const EntryStore* store);
    // Host -> device on the op stream without waiting for it: small copies go through a pinned
    // staging ring (a copy from pageable memory may serialise the host with the stream).
    void copy_to_device(void* dst, const void* src, size_t bytes);
    // A device copy of host data that lives until `keep` goes (tensor-backed scratch).
    Tensor scratch(DType dtype, std::vector<int64_t> shape) { return empty(dtype, std::move(shape)); }

private:
    // Grid for 256-thread element-wise kernels that stride over n elements.
    int elementwise_blocks(int64_t n) const;
    // hc_pre / hc_mix / hc_pre_norm: collapsed (or pre) + post + comb; with a norm weight the
    // collapsed rows are RMS-normalised and weighted in the same kernel.
    void mix_coefficients(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                          const MhcParams& p, float* collapsed, float* pre, Tensor& post, Tensor& comb,
                          CollapseNorm norm = {});
    // The attention kernels (attention.cu): steps of a few tokens go to launch_attention_decode,
    // which prepares the queries in registers and, with positions and out_rope
    // (attend_and_store), stores the step's keys and de-ropes the output in its merge; other
    // steps get a norm/rope pass first and, in the fast precision, the tensor-core kernel
    // (attention_mma.cu), else the tiled kernel (attention_tiled.cu) or, where it does not fit, a
    // block per (token, head). Returns whether the keys
    // were stored and the output de-roped (or nothing was to do).
    bool launch_attention(std::span<const SeqSlice> seqs, const AttentionArgs& a, const Tensor* positions,
                          const Rope* out_rope, const QueryPrep& q_prep = {});
    // attention_tiled.cu (a block per token and head group, keys staged in shared memory); false
    // when the step does not fit it (head_dim not a multiple of 4 or above 512, DSpark blocks) or
    // the variant is off.
    bool launch_attention_tiled(const attn::AttnParams& p, int tokens);
    // attention_mma.cu (bf16 queries and keys on tensor cores); false outside the fast precision,
    // in deterministic mode, for DSpark blocks, heads not a multiple of 32, head_dim not a
    // multiple of 64 or above 512, or with the variant off.
    bool launch_attention_mma(const attn::AttnParams& p, int tokens);
    // indexer_mma.cu: the indexer's scores on tensor cores (bf16 queries and keys); false outside
    // the fast precision, in deterministic mode, above 64 heads or 128 dims, for heads or dims not
    // a multiple of 16, or with the variant off.
    bool launch_index_scores_mma(const indexer::IndexParams& p, int tokens);
    // moe_staged.cu: the grouped experts' up and down products in the fast precision with the
    // weights staged through shared memory (variant moe_staged); xb: [pairs' tokens, d] bf16,
    // hb: [pairs, inter] bf16 scratch, y: [pairs, d] weighted per pair.
    void launch_moe_staged(const __nv_bfloat16* xb, int d, const int* order, const int* offsets, const ExpertRows* rows,
                           int experts, int pairs, int top_k, int inter, float limit, __nv_bfloat16* hb,
                           const float* weights, float* y);
    // attention_decode.cu; false when the step does not fit it (head_dim not a multiple of 4 or
    // above 512, more (token, head group) pairs than SMs).
    bool launch_attention_decode(std::span<const SeqSlice> seqs, const AttentionArgs& a, const Tensor* positions,
                                 const Rope* out_rope, const QueryPrep& q_prep);
    // One mHC site's launch over split blocks with a barrier (mhc.cu), when the grid fits on the
    // GPU at once; y non-null also applies the previous site's stream update first.
    bool launch_hc_site(const HcPreArgs& a, int64_t n, float* streams, const float* y, const float* fn);
    // Passes the variants on to what caches or holds a copy of them (graph segments, occupancy).
    void variants_changed();
    void candidate_stage(std::span<const SeqSlice> seqs, const IndexerArgs& a, Tensor& scores, int64_t ld);
    const Tensor& device_copy_of(std::vector<char> bytes);
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
    // Deterministic mode's routed experts (det_gemm.cu's grouped products): pairs grouped by
    // expert on the device, every pair its own row, slots added in slot order.
    void moe_experts_invariant(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                               float limit, Tensor& out);

    int device_;
    int sm_count_ = 0;
    cudaStream_t stream_ = nullptr;
    // The transfer queue: a side stream that waits for the main stream's work queued before a
    // transfer, and that the main stream waits for before its later work.
    cudaStream_t copy_stream_ = nullptr;
    cudaEvent_t main_done_ = nullptr, copies_done_ = nullptr;
    void begin_transfers();
    void end_transfers();
    void destroy_transfer_queue();
    cublasHandle_t cublas_ = nullptr;
    std::shared_ptr<DeviceAllocator> allocator_ = DeviceAllocator::create();
    std::vector<std::pair<std::vector<char>, Tensor>> meta_;  // recent metadata uploads, oldest first
    OpProfiler profiler_;
    std::unique_ptr<GraphRecorder> graphs_;  // on stream_; destroyed before it
    void* cublas_workspace_ = nullptr;        // cuBLAS under graph capture must not allocate its own
    int gemm_parts_ = 2;           // bf16 parts per fp32 activation in GEMMs
    bool invariant_ = false;       // deterministic mode (batch_invariant)
    int gemv_blocks_per_sm_[kGemvMaxRows] = {};  // resident blocks of gemv_warp_kernel<m>, looked up once
    // Kernel choices that set_variant can change for A/B measurements (defaults: the measured
    // best). Names: gemv_one_row_warp_rows 2|4, gemv_one_row_warp_unroll 4|8,
    // gemv_one_row_block_rows 2|4 (one activation row's GEMV tasks); attention_decode 0|1 (0:
    // small steps on the block-per-(token, head) kernel); attention_tiled 0|1 (0: large steps on
    // the block-per-(token, head) kernel); attention_mma 0|1 (0: large steps of the fast precision
    // on the fp32 tiled kernel); attention_mma_blocks 1|2 (blocks an SM the tensor-core kernel's
    // register cap is set for); indexer_mma 0|1 (0: the fast precision's indexer scores on CUDA
    // cores in fp32); moe_staged 0|1 (the fast precision's grouped experts with weights staged
    // through shared memory by cp.async, moe_staged.cu); moe_staged_max_pairs 1024..16384 (the most
    // (token, slot) pairs those kernels take; more: grouped cuBLAS GEMMs); moe_staged_wide 0|1
    // (passes of 128 pairs where experts average more than 64); indexer_sort 0|1 (0: long prefills' indexer picks by
    // repeated argmax instead of a sort); moe_grouped_mma 0|1 (0: experts grouped on the device on
    // CUDA cores with fp32 activations); moe_mma_steps_in_flight 1|4 (k steps of weights the
    // tensor-core expert kernels request before their products); attention_decode_splits 1..32 (most
    // key shares per (token, head group)); hc_site 0|1 (0: mHC sites as last-block kernels);
    // hc_site_tagged 0|1 (the site's blocks exchange sums as tagged words, 0: behind a barrier);
    // moe_up_unroll / moe_down_unroll 4|8 (per-pair expert kernels' strides in flight);
    // moe_shared_prefetch 0|1 (those kernels start the shared expert's rows into L2 before the
    // PDL wait; measured slower: 2.02 vs 1.97-2.00 ms, flash-dims batch 1);
    // graph_first_segment_ops / graph_segment_ops 1..1000 (outer ops in a step's first captured
    // graph segment; each later one doubles, up to graph_segment_ops); gemv_prefetch_mib 0..48
    // (weights a GEMV prefetches into L2 before its PDL wait: the batch-1 step of flash-dims ran
    // 2.13 ms eager with 16 MiB, 2.09 with none; docs/benchmarks.md).
    struct KernelVariants {
        int gemv_warp_rows = 2, gemv_warp_unroll = 8, gemv_block_rows = 4, gemv_prefetch_mib = 0;
        bool attention_decode = true, attention_tiled = true, attention_mma = true, indexer_sort = true;
        bool indexer_mma = true, moe_grouped_mma = true, moe_staged = true;
        int attention_decode_splits = 16, moe_mma_steps_in_flight = 4, attention_mma_blocks = 2;
        int moe_staged_max_pairs = 1024;
        bool moe_staged_wide = false;  // not yet run on a GPU
        bool hc_site = true, hc_site_tagged = true;
        int moe_up_unroll = 8, moe_down_unroll = 8;
        bool moe_shared_prefetch = false;
        int graph_first_segment_ops = 4, graph_segment_ops = 48;
    } variants_;
    bool grouped_gemm_ok_ = true;  // cleared when cuBLAS reports no grouped GEMM for bf16 -> fp32
    Tensor hc_arrivals_;  // [2, kMaxHcSplitTokens] int32 split-block counters per token (mhc.cu), zero between launches
    size_t tiled_attention_smem_ = 0;  // dynamic shared memory the tiled attention kernel may use
    size_t mma_attention_smem_ = 0;    // and the tensor-core one
    bool moe_staged_smem_set_[2] = {};  // the staged expert kernels (64 / 128 pairs a pass) may use their shared memory
    Tensor attn_arrivals_;  // [sm_count_ + 1] int32 split-attention counters (attention.cu), zero between launches
    int hc_site_resident_ = 0;  // blocks of hc_site_kernel an SM holds at once, looked up once
    Tensor hc_site_words_;      // the mHC sites' tagged partial sums (mhc.cu), allocated at first use
    unsigned hc_site_tag_ = 0;  // the last site launch's tag
    char* staging_ = nullptr;  // pinned ring for small host -> device copies
    size_t staging_used_ = 0;
    struct ExpertRowTable {
        std::vector<ExpertRows> host;
        Tensor device;
    };
    std::map<const ExpertWeights*, ExpertRowTable> expert_rows_;  // per MoE layer
};

}  // namespace deepinfer::kernels::cuda
