// Copies between device memory and page-locked host memory for the prefix cache's host tier, on a
// side stream so they overlap the steps' kernels. Ordering: the side stream first waits for what
// the main stream had queued (the blocks it reads were written by earlier steps), and the main
// stream's later work waits for the copies (a step reads restored blocks; an evicted block is
// reused only after its copy out).
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {

Tensor CudaBackend::host_buffer(int64_t bytes) {
    DI_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    DI_CUDA_CHECK(cudaHostAlloc(&p, static_cast<size_t>(bytes), cudaHostAllocDefault));
    std::shared_ptr<void> owner(p, [](void* q) { cudaFreeHost(q); });
    return Tensor::wrap(p, DType::kU8, {bytes}, std::move(owner), Device::kCpu);
}

void CudaBackend::begin_transfers() {
    DI_CUDA_CHECK(cudaSetDevice(device_));
    if (copy_stream_ == nullptr) {
        DI_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
        DI_CUDA_CHECK(cudaEventCreateWithFlags(&main_done_, cudaEventDisableTiming));
        DI_CUDA_CHECK(cudaEventCreateWithFlags(&copies_done_, cudaEventDisableTiming));
    }
    exec_->graphs().flush();  // recorded work must be on the stream before the event
    DI_CUDA_CHECK(cudaEventRecord(main_done_, stream_));
    DI_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, main_done_, 0));
}

void CudaBackend::end_transfers() {
    DI_CUDA_CHECK(cudaEventRecord(copies_done_, copy_stream_));
    DI_CUDA_CHECK(cudaStreamWaitEvent(stream_, copies_done_, 0));
}

void CudaBackend::transfer_to_host(std::span<const HostTransfer> copies) {
    begin_transfers();
    for (const HostTransfer& c : copies)
        DI_CUDA_CHECK(cudaMemcpyAsync(c.host, c.device.raw(), c.device.nbytes(), cudaMemcpyDeviceToHost, copy_stream_));
    end_transfers();
}

void CudaBackend::transfer_to_device(std::span<const HostTransfer> copies) {
    begin_transfers();
    for (const HostTransfer& c : copies)
        DI_CUDA_CHECK(cudaMemcpyAsync(c.device.raw(), c.host, c.device.nbytes(), cudaMemcpyHostToDevice, copy_stream_));
    end_transfers();
}

void CudaBackend::sync_transfers() {
    if (copies_done_ != nullptr) DI_CUDA_CHECK(cudaEventSynchronize(copies_done_));
}

void CudaBackend::destroy_transfer_queue() {
    if (copy_stream_ == nullptr) return;
    cudaStreamSynchronize(copy_stream_);
    cudaEventDestroy(main_done_);
    cudaEventDestroy(copies_done_);
    cudaStreamDestroy(copy_stream_);
    copy_stream_ = nullptr;
}

}  // namespace deepinfer::kernels::cuda
