#include "kernels/cuda/cuda_execution.cuh"

#include "kernels/cuda/common.cuh"

namespace deepinfer::kernels::cuda {

CudaExecution::CudaExecution(cudaStream_t stream)
    : stream_(stream),
      graphs_(std::make_unique<GraphRecorder>(stream, CudaKernelConfig{}.graph_first_segment_ops,
                                              CudaKernelConfig{}.graph_segment_ops)) {}

std::string CudaExecution::profile_report() {
    GraphRecorder::Counts c = graphs_->counts();
    return profiler_.report(stream_) + "graph segments so far: " + std::to_string(c.segments) + " launched, " +
           std::to_string(c.updated) + " updated in place, " + std::to_string(c.instantiated) + " instantiated\n";
}

bool CudaExecution::set_kernels(const KernelConfig& config) {
    std::string error = kernel_config_error(config);
    DI_CUDA_REQUIRE(error.empty(), error);
    knobs_ = config.cuda;
    graphs_->set_segment_ops(knobs_.graph_first_segment_ops, knobs_.graph_segment_ops);
    return true;
}

}  // namespace deepinfer::kernels::cuda
