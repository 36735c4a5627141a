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
#include "kernels/cuda/attention_family.cuh"
#include "kernels/cuda/cuda_execution.cuh"
#include "kernels/cuda/mhc_family.cuh"
#include "kernels/cuda/moe_family.cuh"

// Marks the enclosing function as one backend op: recorded into the step's graph segment when a
// graph step is open (see GraphRecorder), timed when profiling is on (see OpProfiler).
#define DI_CUDA_OP(name)                                                        \
    ::deepinfer::kernels::cuda::GraphOpScope graph_scope__(&exec_->graphs()); \
    ::deepinfer::kernels::cuda::OpProfiler::Scope op_scope__(&exec_->profiler(), name, stream_)

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

// Per-sequence metadata as the kernels read it.
struct DeviceSeq {
    int token_begin, num_tokens;
    long long start_pos;
    int state_idx;
    int table_offset;  // into the op's flat block-table array
    long long window_from;
};

namespace indexer {
struct IndexParams;  // indexer_common.cuh
}

class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int device);
    ~CudaBackend() override;

    Device device() const override { return Device::kCuda; }
    const char* name() const override { return "cuda"; }
    Execution& execution() override { return *exec_; }
    const Execution& execution() const override { return *exec_; }
    // FP8 linears as stored (fp8_weights.cu), unless the knob fp8_weights is off.
    bool reads_fp8() const override { return exec_->knobs().fp8_weights; }

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
    bool gemv(std::span<const GemvProduct> products, int64_t lda, int64_t m, bool accumulate);
    // FP8 weights as stored (fp8_weights.cu): y (+)= x · wᵀ for m <= kGemvMaxRows rows straight from
    // the codes (false, nothing launched, where the shapes or alignment do not suit it), and the
    // matrix widened to bf16 in scratch (exactly the values a load-time widening gives).
    bool fp8_gemv(const float* x, int64_t lda, const Tensor& w, float* y, int64_t ldy, int64_t m, bool accumulate);
    Tensor widen_fp8(const Tensor& w);
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
    // What the op families share (attention_family.cuh, ...): the op stream, the SM count, the
    // kernel knobs and the execution mode.
    cudaStream_t stream() const { return stream_; }
    int sm_count() const { return sm_count_; }
    const CudaKernelConfig& knobs() const { return exec_->knobs(); }
    bool invariant() const { return exec_->batch_invariant(); }
    int gemm_parts() const { return exec_->gemm_parts(); }
    bool fast_kernels() const { return exec_->fast_kernels(); }
    GraphRecorder& graphs() { return exec_->graphs(); }
    // Blocks of `kernel` (`threads` a block, no dynamic shared memory) an SM holds at once,
    // looked up once per kernel.
    int resident_blocks(const void* kernel, int threads);
    cublasHandle_t cublas() const { return cublas_; }

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
    // indexer_mma.cu: the indexer's scores on tensor cores (bf16 queries and keys); false outside
    // the fast precision, in deterministic mode, above 64 heads or 128 dims, for heads or dims not
    // a multiple of 16, or with the variant off.
    bool launch_index_scores_mma(const indexer::IndexParams& p, int tokens);
    void candidate_stage(std::span<const SeqSlice> seqs, const IndexerArgs& a, Tensor& scores, int64_t ld);
    const Tensor& device_copy_of(std::vector<char> bytes);

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
    std::unique_ptr<CudaExecution> exec_;  // its graphs are on stream_: released before it
    // The op families, made once the stream and memory are up.
    std::unique_ptr<AttentionFamily> attention_;
    std::unique_ptr<MoeFamily> moe_;
    std::unique_ptr<MhcFamily> mhc_;
    void* cublas_workspace_ = nullptr;        // cuBLAS under graph capture must not allocate its own
    std::map<const void*, int> resident_blocks_;  // resident_blocks(), by kernel
    char* staging_ = nullptr;  // pinned ring for small host -> device copies
    size_t staging_used_ = 0;
};

}  // namespace deepinfer::kernels::cuda
