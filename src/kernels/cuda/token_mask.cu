// Structured output on the device: grammar masks applied to the logits before sampling or the
// greedy argmax, and the stream drained when the step's mask deadline must be measured.
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

// Structured output: one thread per (mask row, token); a clear bit sends the token's logit to -inf.
__global__ void apply_token_mask_kernel(float* logits, int64_t cols, const int* rows, const uint32_t* mask, int64_t words) {
    pdl_prologue();
    int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (v >= cols) return;
    uint32_t w = mask[blockIdx.y * words + (v >> 5)];
    if (!((w >> (v & 31)) & 1u)) logits[rows[blockIdx.y] * cols + v] = -INFINITY;
}

}  // namespace

void CudaBackend::apply_token_mask(Tensor& logits, const Tensor& rows, const Tensor& mask) {
    DI_CUDA_OP("apply_token_mask");
    int64_t cols = logits.dim(-1), num_rows = rows.numel(), words = (cols + 31) / 32;
    DI_CUDA_REQUIRE(cols > 0 && rows.dtype() == DType::kI32 && mask.dtype() == DType::kI32 && mask.numel() == num_rows * words &&
                        num_rows <= 65535,
                    "apply_token_mask: logits " + logits.shape_string() + ", rows " + rows.shape_string() + ", mask " +
                        mask.shape_string());
    if (num_rows == 0) return;
    dim3 grid(static_cast<unsigned>((cols + 255) / 256), static_cast<unsigned>(num_rows));
    launch_pdl(apply_token_mask_kernel, grid, 256, 0, stream_, logits.data<float>(), cols, rows.data<int>(),
               reinterpret_cast<const uint32_t*>(mask.raw()), words);
}

void CudaBackend::synchronize() {
    exec_->graphs().flush();
    DI_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace deepinfer::kernels::cuda
