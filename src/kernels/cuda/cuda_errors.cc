// Error reporting for the CUDA sources (which cannot include fmt; see common.cuh).
#include <string>

#include "base/error.h"

namespace deepinfer::kernels::cuda {

[[noreturn]] void raise(const std::string& message) { throw Error(message); }

}  // namespace deepinfer::kernels::cuda
