// DeepSeek-V4.1 ops on the GPU. Not written yet: each reports that clearly, so a V4.1 model on
// `--device cuda` stops at load time with a message instead of computing something else.
#include <string>

#include "kernels/cuda/cuda_backend_impl.cuh"

namespace deepinfer::kernels::cuda {
namespace {

[[noreturn]] void not_yet(const char* op) {
    raise(std::string("the CUDA backend has no ") + op + " yet (DeepSeek-V4.1 runs on the CPU backend for now)");
}

}  // namespace

void CudaBackend::hc_mix(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const MhcParams&, Tensor&, Tensor&,
                         Tensor&) {
    not_yet("hc_mix");
}
void CudaBackend::engram_gate(Tensor&, const Tensor&, const Tensor&, float) { not_yet("engram_gate"); }
void CudaBackend::hc_collapse(const Tensor&, const Tensor&, Tensor&) { not_yet("hc_collapse"); }
void CudaBackend::pool_groups(std::span<const SeqSlice>, const PoolArgs&) { not_yet("pool_groups"); }
void CudaBackend::store_entries(std::span<const EntrySlot>, const Tensor&, const EntryStore&) { not_yet("store_entries"); }
void CudaBackend::fake_quantize(Tensor&, QuantFormat) { not_yet("fake_quantize"); }

}  // namespace deepinfer::kernels::cuda
