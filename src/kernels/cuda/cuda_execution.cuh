#pragma once
// The CUDA backend's Execution: the products' precision, deterministic mode, the per-op
// profiler, the graph recorder of the op stream and the kernel knobs. The op families read it;
// only the model, the engine and the benchmarks change it.
#include <memory>
#include <string>

#include "kernels/cuda/graph_recorder.cuh"
#include "kernels/cuda/op_profiler.cuh"
#include "kernels/execution.h"

namespace deepinfer::kernels::cuda {

class CudaExecution final : public Execution {
public:
    explicit CudaExecution(cudaStream_t stream);

    void set_matmul_precision(MatmulPrecision p) override { precision_ = p; }
    MatmulPrecision matmul_precision() const override { return precision_; }
    // bf16 parts per fp32 activation in the products: 1 (fast), 2 or 3 (exact).
    int gemm_parts() const {
        return precision_ == MatmulPrecision::kFp32 ? 3 : precision_ == MatmulPrecision::kBf16x2 ? 2 : 1;
    }
    // The fast precision's own kernels (tensor-core attention and indexer scores, staged experts)
    // run only here: outside deterministic mode, with bf16 activations.
    bool fast_kernels() const { return gemm_parts() == 1 && !invariant_; }

    // Deterministic mode: every op takes one path whatever the batch (det_gemm.cu for products,
    // the tiled attention kernel, scored indexer picks, the GEMM form of the mHC mixes, the
    // device-grouped experts); see docs/architecture.md.
    bool batch_invariant() const override { return invariant_; }
    bool set_batch_invariant(bool on) override {
        invariant_ = on;
        return true;
    }

    void set_profiling(bool on) override { profiler_.enable(on); }
    std::string profile_report() override;
    OpProfiler& profiler() { return profiler_; }

    // Graph steps are skipped while profiling (the per-op events would land inside the graphs);
    // deterministic mode's kernels differ, so its steps have graphs of their own.
    void begin_graph_step(uint64_t shape) override {
        if (!profiler_.enabled()) graphs_->begin_step(invariant_ ? shape ^ (uint64_t{1} << 63) : shape);
    }
    void end_graph_step(bool launch) override { graphs_->end_step(launch); }
    void set_graphs(bool on) override { graphs_->set_enabled(on); }
    GraphRecorder& graphs() { return *graphs_; }
    // Before the stream goes: recorded graphs hold work for it.
    void release_graphs() { graphs_.reset(); }

    bool set_kernels(const KernelConfig& config) override;
    KernelConfig kernels() const override { return {knobs_}; }
    const CudaKernelConfig& knobs() const { return knobs_; }

private:
    cudaStream_t stream_;
    MatmulPrecision precision_ = MatmulPrecision::kBf16x2;
    bool invariant_ = false;
    OpProfiler profiler_;
    std::unique_ptr<GraphRecorder> graphs_;
    CudaKernelConfig knobs_;
};

}  // namespace deepinfer::kernels::cuda
