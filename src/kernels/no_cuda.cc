// Stands in for the CUDA backend in builds without a CUDA compiler.
#include "base/error.h"
#include "kernels/cuda/cuda_backend.h"

namespace deepinfer::kernels {

std::unique_ptr<Backend> make_cuda_backend(int) { fail("this build of deepinfer has no CUDA backend (built without nvcc)"); }

}  // namespace deepinfer::kernels
