#pragma once
// Per-op timing of the CUDA backend for benchmarks. Each op's launches are bracketed by two events
// on the stream (their span is the op's device time, including any gaps between its launches),
// and the host time spent inside the op is summed beside it. Nested ops count toward the outer one.
#include <cuda_runtime.h>

#include <chrono>
#include <string>
#include <vector>

namespace deepinfer::kernels::cuda {

class OpProfiler {
public:
    class Scope {
    public:
        Scope(OpProfiler* p, const char* name, cudaStream_t stream);
        ~Scope();
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;

    private:
        OpProfiler* p_;
        bool outer_ = false;
        cudaStream_t stream_;
        std::chrono::steady_clock::time_point t0_;
    };

    ~OpProfiler();
    void enable(bool on) { on_ = on; }
    bool enabled() const { return on_; }
    // Waits for the stream, then one line per op name, largest device time first.
    std::string report(cudaStream_t stream);

private:
    struct Record {
        const char* name;
        cudaEvent_t start, stop;
        double host_us;
    };
    cudaEvent_t event();

    bool on_ = false;
    int depth_ = 0;
    std::vector<Record> records_;
    std::vector<cudaEvent_t> spare_;
};

}  // namespace deepinfer::kernels::cuda
