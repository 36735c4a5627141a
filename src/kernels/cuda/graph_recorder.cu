#include "kernels/cuda/common.cuh"
#include "kernels/cuda/graph_recorder.cuh"

#include <algorithm>

namespace deepinfer::kernels::cuda {

GraphRecorder::~GraphRecorder() {
    end_step(false);
    for (auto& [key, variants] : execs_)
        for (cudaGraphExec_t e : variants.execs) cudaGraphExecDestroy(e);
}

void GraphRecorder::begin_step(uint64_t shape) {
    if (!enabled_) return;
    in_step_ = true;
    segment_ = 0;
    segment_ops_ = std::min(first_ops_, most_ops_);
    shape_ = shape;
}

void GraphRecorder::end_step(bool launch) {
    if (launch) {
        flush();
    } else if (capturing_) {
        cudaGraph_t graph = nullptr;
        cudaStreamEndCapture(stream_, &graph);  // may report the capture invalidated: nothing to run either way
        if (graph != nullptr) cudaGraphDestroy(graph);
        cudaGetLastError();
        capturing_ = false;
    }
    in_step_ = false;
    ops_ = 0;
}

void GraphRecorder::op_begin() {
    if (depth_++ > 0 || !in_step_ || capturing_) return;
    // Relaxed: an op may allocate device memory (cudaMalloc) the first time a size is needed.
    DI_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
    capturing_ = true;
}

void GraphRecorder::op_end(bool failed) {
    if (--depth_ > 0) return;
    if (failed) {
        end_step(false);
        return;
    }
    if (capturing_ && ++ops_ >= segment_ops_) flush();
}

void GraphRecorder::flush() {
    if (!capturing_) return;
    capturing_ = false;
    ops_ = 0;
    cudaGraph_t graph = nullptr;
    DI_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    size_t nodes = 0;
    cudaError_t err = cudaGraphGetNodes(graph, nullptr, &nodes);
    if (err == cudaSuccess && nodes > 0) {
        cudaGraphExec_t exec = nullptr;
        try {
            exec = exec_for(graph);
        } catch (...) {
            cudaGraphDestroy(graph);
            throw;
        }
        err = cudaGraphLaunch(exec, stream_);
        ++counts_.segments;
    }
    cudaGraphDestroy(graph);
    ++segment_;
    segment_ops_ = std::min(2 * segment_ops_, most_ops_);
    DI_CUDA_CHECK(err);
}

cudaGraphExec_t GraphRecorder::exec_for(cudaGraph_t graph) {
    auto key = std::make_pair(segment_, shape_);
    if (execs_.size() >= kMaxKeys && !execs_.contains(key)) evict_oldest();
    Variants& v = execs_[key];
    v.last_use = ++uses_;
    for (size_t i = 0; i < v.execs.size(); ++i) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(v.execs[i], graph, &info) == cudaSuccess) {
            std::swap(v.execs[i], v.execs[0]);  // most recently used first
            ++counts_.updated;
            return v.execs[0];
        }
        cudaGetLastError();  // an update refused for another topology is not an error
    }
    cudaGraphExec_t exec = nullptr;
    DI_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    ++counts_.instantiated;
    if (v.execs.size() == kVariantsPerSegment) {
        cudaGraphExecDestroy(v.execs.back());  // an in-flight launch still completes
        v.execs.pop_back();
    }
    v.execs.insert(v.execs.begin(), exec);
    return exec;
}

void GraphRecorder::evict_oldest() {
    auto oldest = execs_.begin();
    for (auto it = execs_.begin(); it != execs_.end(); ++it)
        if (it->second.last_use < oldest->second.last_use) oldest = it;
    for (cudaGraphExec_t e : oldest->second.execs) cudaGraphExecDestroy(e);
    execs_.erase(oldest);
}

}  // namespace deepinfer::kernels::cuda
