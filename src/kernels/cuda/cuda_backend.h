#pragma once
// The CUDA backend's factory; the only header of kernels/cuda that others include, so it names no
// CUDA types. Everything else in this directory is CUDA code.
#include <memory>

#include "kernels/backend.h"

namespace deepinfer::kernels {

// Throws deepinfer::Error when the build has no CUDA or no usable GPU `device` is present.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

}  // namespace deepinfer::kernels
