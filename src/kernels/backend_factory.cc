// Picks the backend named on the command line or in the config (the one place that does), and
// the Backend defaults that need no device.
#include <cstring>

#include "base/error.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace deepinfer::kernels {

std::unique_ptr<Backend> make_backend(const std::string& device, int num_threads) {
    if (device.empty() || device == "cpu") return make_cpu_backend(num_threads);
    if (device == "cuda") return make_cuda_backend(0);
    if (device.rfind("cuda:", 0) == 0) {
        try {
            return make_cuda_backend(std::stoi(device.substr(5)));
        } catch (const std::invalid_argument&) {
        }
    }
    fail("unknown device '{}' (cpu, cuda, cuda:N)", device);
}

}  // namespace deepinfer::kernels

namespace deepinfer::kernels {

// The default transfers, for backends whose device memory is host memory.
void Backend::transfer_to_host(std::span<const HostTransfer> copies) {
    for (const HostTransfer& c : copies) {
        DI_CHECK(c.device.device() == Device::kCpu, "{}: no transfer path for device memory", name());
        std::memcpy(c.host, c.device.raw(), c.device.nbytes());
    }
}

void Backend::transfer_to_device(std::span<const HostTransfer> copies) {
    for (const HostTransfer& c : copies) {
        DI_CHECK(c.device.device() == Device::kCpu, "{}: no transfer path for device memory", name());
        std::memcpy(c.device.raw(), c.host, c.device.nbytes());
    }
}

}  // namespace deepinfer::kernels
