#include <algorithm>
#include <cstdio>
#include <map>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/op_profiler.cuh"

namespace deepinfer::kernels::cuda {

OpProfiler::Scope::Scope(OpProfiler* p, const char* name, cudaStream_t stream) : p_(p), stream_(stream) {
    outer_ = p_->on_ && p_->depth_ == 0;
    ++p_->depth_;
    if (!outer_) return;
    p_->records_.push_back({name, p_->event(), p_->event(), 0.0});
    DI_CUDA_CHECK(cudaEventRecord(p_->records_.back().start, stream_));
    t0_ = std::chrono::steady_clock::now();
}

OpProfiler::Scope::~Scope() {
    --p_->depth_;
    if (!outer_) return;
    Record& r = p_->records_.back();
    r.host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count();
    cudaEventRecord(r.stop, stream_);  // no throw from a destructor; errors surface at report()
}

OpProfiler::~OpProfiler() {
    for (auto& r : records_) spare_.push_back(r.start), spare_.push_back(r.stop);
    for (cudaEvent_t e : spare_) cudaEventDestroy(e);
}

cudaEvent_t OpProfiler::event() {
    if (spare_.empty()) {
        cudaEvent_t e;
        DI_CUDA_CHECK(cudaEventCreate(&e));
        return e;
    }
    cudaEvent_t e = spare_.back();
    spare_.pop_back();
    return e;
}

std::string OpProfiler::report(cudaStream_t stream) {
    DI_CUDA_CHECK(cudaStreamSynchronize(stream));
    struct Sum {
        int calls = 0;
        double device_us = 0, host_us = 0;
    };
    std::map<std::string, Sum> by_op;
    Sum total;
    for (auto& r : records_) {
        float ms = 0;
        DI_CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.stop));
        for (Sum* s : {&by_op[r.name], &total}) ++s->calls, s->device_us += ms * 1e3, s->host_us += r.host_us;
        spare_.push_back(r.start), spare_.push_back(r.stop);
    }
    records_.clear();
    std::vector<std::pair<std::string, Sum>> rows(by_op.begin(), by_op.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.device_us > b.second.device_us; });
    rows.emplace_back("total", total);
    std::string out = "| op | calls | device us | host us |\n| --- | --- | --- | --- |\n";
    char line[160];
    for (const auto& [name, s] : rows) {
        std::snprintf(line, sizeof line, "| %s | %d | %.1f | %.1f |\n", name.c_str(), s.calls, s.device_us, s.host_us);
        out += line;
    }
    return out;
}

}  // namespace deepinfer::kernels::cuda
