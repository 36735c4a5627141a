#pragma once
// How a backend runs its ops, apart from what each op computes (Backend::execution()): the
// products' arithmetic, deterministic mode, per-op profiling, device graphs and the kernel
// choices of the config tree. The model, the engine and the benchmarks set these; the op
// interface (backend.h) never takes them as arguments.
#include <cstdint>
#include <string>

#include "deepinfer/kernel_config.h"

namespace deepinfer::kernels {

// How exactly matmul treats fp32 activations against bf16 weights: kBf16 rounds them to bf16
// (one bf16 dot product, fp32 accumulation: the fast precision), kBf16x2 keeps ~16 mantissa bits
// as two bf16 parts (CUDA; the CPU computes it in fp32), kFp32 all 24 (for models whose QAT fake
// quantisation turns tiny differences into different rounding decisions, and parity tests).
enum class MatmulPrecision { kBf16, kBf16x2, kFp32 };

class Execution {
public:
    virtual ~Execution() = default;

    virtual void set_matmul_precision(MatmulPrecision) = 0;
    virtual MatmulPrecision matmul_precision() const = 0;
    // WeightQuant::kQ8: products with MXFP4 weights quantize their activations to 8-bit blocks (as
    // Q8 weights always do) instead of decoding the weights for fp32 or bf16 activations.
    virtual void set_int8_activations(bool) {}

    // Whether every op computes a row's result in the same order whatever the batch around it
    // (its size, the row's place, prefill or decode): what deterministic requests need.
    virtual bool batch_invariant() const { return false; }
    // Asks for batch-invariant ops from now on (a backend with a faster batch-dependent path
    // switches to one path per op); returns whether the backend is batch-invariant when asked on.
    virtual bool set_batch_invariant(bool on) { return !on || batch_invariant(); }

    // Per-op timing for benchmarks: while on, a device backend times every op on its queue;
    // profile_report() waits for the queue and returns a table per op name (calls, device span,
    // host time spent issuing) of what ran since profiling was turned on, then starts over.
    virtual void set_profiling(bool) {}
    virtual std::string profile_report() { return {}; }

    // Ops between begin_graph_step() and end_graph_step() may be recorded into device graphs and
    // launched in segments (CUDA graphs: far fewer launches for the small kernels of a decode
    // step). end_graph_step(false) drops recorded work that has not run (an op failed half-way).
    // set_graphs(false) turns recording off (benchmarks compare both). Results are the same.
    // `shape` names the step's shape (its token counts): recordings are reused only within one.
    virtual void begin_graph_step(uint64_t /*shape*/) {}
    virtual void end_graph_step(bool /*launch*/ = true) {}
    virtual void set_graphs(bool) {}

    // The kernel choices (deepinfer/kernel_config.h); a backend reads its device's part. Returns
    // whether this backend has kernel choices at all (the host backends have none).
    virtual bool set_kernels(const KernelConfig&) { return false; }
    virtual KernelConfig kernels() const { return {}; }
};

// The host backends' execution: settings only (no queue, graphs or kernel choices), and ops that
// are batch-invariant whatever is asked.
class HostExecution final : public Execution {
public:
    void set_matmul_precision(MatmulPrecision p) override { precision_ = p; }
    MatmulPrecision matmul_precision() const override { return precision_; }
    void set_int8_activations(bool on) override { int8_activations_ = on; }
    bool int8_activations() const { return int8_activations_; }
    bool batch_invariant() const override { return true; }

private:
    MatmulPrecision precision_ = MatmulPrecision::kFp32;
    bool int8_activations_ = false;
};

}  // namespace deepinfer::kernels
