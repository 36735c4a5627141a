#pragma once
// Captures the ops of a step into CUDA graphs and launches them in segments.
//
// A batch-1 decode step is a few hundred small kernels; launched one by one, each pays the
// launch path and the gap before the next. Inside a step the recorder captures the stream's work
// (kernels, small copies, cuBLAS calls) into graph segments and launches each once it holds
// enough outer ops, so the host captures segment s+1 while the GPU runs segment s. The first
// segment is short (4 ops by default) so the GPU starts early, and each later one doubles, up to
// 48 (the batch-1 step of the flash-dims checkpoint: 2.22 ms with segments of 24, 2.13 ms so;
// docs/benchmarks.md). The executable graph of segment s is kept and updated in place next step
// (same kernels, new arguments), which is far cheaper than instantiating it. Executables are
// kept per (segment, step shape): the caller names the shape (steps with equal token counts run
// the same library kernels, as cuBLAS picks its kernel from the GEMM sizes). Updating one shape's
// executable with another's segment was accepted by CUDA yet gave wrong logits on the H200
// (16-token chunk steps replayed through executables recorded for 1-, 7- and 64-token steps; the
// cause was not pinned down, possibly a cuBLAS kernel's launch attribute that the update does not
// carry). Within a shape a few variants cover segments whose own kernels differ (a compressor
// emitting an entry).
//
// Anything that needs the stream's results on the host (downloads, host-routed MoE) must call
// flush() first; the ops after it start a new segment.
#include <cuda_runtime.h>

#include <cstdint>
#include <exception>
#include <map>
#include <utility>
#include <vector>

namespace deepinfer::kernels::cuda {

class GraphRecorder {
public:
    GraphRecorder(cudaStream_t stream, int first_ops, int most_ops)
        : stream_(stream), first_ops_(first_ops), most_ops_(most_ops) {}
    ~GraphRecorder();
    GraphRecorder(const GraphRecorder&) = delete;
    GraphRecorder& operator=(const GraphRecorder&) = delete;

    // Master switch (on by default); off makes begin_step() a no-op.
    void set_enabled(bool on) { enabled_ = on; }
    // Outer ops in a step's first segment (>= 1); each later segment takes twice the ops of the
    // one before, up to `most`. A short first segment starts the GPU sooner; growing ones stay
    // ahead of it while the host captures the next.
    void set_segment_ops(int first, int most) { first_ops_ = first, most_ops_ = most; }
    bool enabled() const { return enabled_; }
    // Ops between begin_step() and end_step() are captured. end_step(false) drops what was
    // captured of the open segment (an op threw half-way: its launches must not run).
    void begin_step(uint64_t shape);
    void end_step(bool launch = true);
    // Closes the open segment and launches it; a no-op when nothing is being captured.
    void flush();

    // Around every backend op (nested ops count once): starts capturing when a step is open and
    // closes the segment after enough ops.
    void op_begin();
    void op_end(bool failed);

    struct Counts {
        long segments = 0, updated = 0, instantiated = 0;
    };
    Counts counts() const { return counts_; }

private:
    static constexpr size_t kVariantsPerSegment = 4;
    static constexpr size_t kMaxKeys = 512;  // (segment, shape) pairs kept; least recently used go
    struct Variants {
        std::vector<cudaGraphExec_t> execs;  // most recently used first
        uint64_t last_use = 0;
    };
    cudaGraphExec_t exec_for(cudaGraph_t graph);
    void evict_oldest();

    cudaStream_t stream_;
    int first_ops_, most_ops_, segment_ops_ = 1;  // segment_ops_: the open segment's limit
    bool enabled_ = true, in_step_ = false, capturing_ = false;
    int depth_ = 0, ops_ = 0;
    size_t segment_ = 0;
    uint64_t shape_ = 0, uses_ = 0;
    std::map<std::pair<size_t, uint64_t>, Variants> execs_;  // by (segment index, step shape)
    Counts counts_;
};

// One op's capture bookkeeping (RAII around GraphRecorder::op_begin/op_end).
class GraphOpScope {
public:
    explicit GraphOpScope(GraphRecorder* r) : r_(r), unwinding_(std::uncaught_exceptions()) { r_->op_begin(); }
    // May throw (a failed launch of the segment); never while an exception is already unwinding.
    ~GraphOpScope() noexcept(false) { r_->op_end(std::uncaught_exceptions() > unwinding_); }
    GraphOpScope(const GraphOpScope&) = delete;
    GraphOpScope& operator=(const GraphOpScope&) = delete;

private:
    GraphRecorder* r_;
    int unwinding_;
};

}  // namespace deepinfer::kernels::cuda
