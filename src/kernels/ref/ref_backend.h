#pragma once
// The scalar reference backend: every op written as the plainest loops over the definition, with
// double accumulation, single-threaded. Tests run an optimised backend and this one on the same
// random inputs and compare; it can also run a whole (tiny) model.
#include <memory>

#include "kernels/backend.h"

namespace deepinfer::kernels {

std::unique_ptr<Backend> make_reference_backend();

}  // namespace deepinfer::kernels
