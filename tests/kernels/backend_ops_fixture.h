#pragma once
// The BackendOps fixture: a backend under test (the CPU backend at one instruction set, or the
// CUDA backend when a GPU is present) next to the scalar reference backend, and the helpers its
// tests share (rope frequencies, positions, kernel variant sets).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/ref/ref_backend.h"
#include "tests/kernels/mirror_backend.h"
#include "tests/test_util.h"

namespace deepinfer::kernels::ops_test {

// "cuda", or a CPU instruction set by name.
class BackendOps : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        ref = make_reference_backend();
        if (GetParam() == "cuda") {
            std::string why;
            cpu = testing::mirrored_cuda_backend(why);
            if (!cpu) GTEST_SKIP() << why;
            // fp32 accumulation in another order (cuBLAS, split-bf16 activations), fast-math exp.
            mm_tol = 1e-4;
            tol = 1e-4;
            return;
        }
        Isa isa = GetParam() == "avx512" ? Isa::kAvx512 : GetParam() == "avx2" ? Isa::kAvx2 : Isa::kScalar;
        if (isa > detect_isa()) GTEST_SKIP() << "CPU lacks " << isa_name(isa);
        cpu = cpu::make_cpu_backend(3, isa);
    }
    bool on_host() const { return GetParam() != "cuda"; }
    std::unique_ptr<Backend> cpu, ref;  // `cpu` is the backend under test
    double tol = 1e-5, mm_tol = 1e-5;   // elementwise ops; ops through a GEMM
    std::mt19937 rng{42};
};

inline Tensor rope_freqs(int rope_dim, float theta) {
    Tensor t = Tensor::empty(DType::kF32, {rope_dim / 2});
    for (int i = 0; i < rope_dim / 2; ++i) t.data<float>()[i] = std::pow(theta, -2.0f * i / rope_dim);
    return t;
}

inline Tensor positions(std::vector<int64_t> p) {
    Tensor t = Tensor::empty(DType::kI64, {static_cast<int64_t>(p.size())});
    std::copy(p.begin(), p.end(), t.data<int64_t>());
    return t;
}

// Kernel knobs (deepinfer/kernel_config.h) a test also runs under: the defaults first, then each
// set on top of the defaults, where the backend has kernel choices (the CPU backends have none).
using VariantSet = std::vector<std::pair<const char*, int>>;

inline bool apply_variants(Backend& b, const VariantSet& set) {
    KernelConfig config;
    std::string why;
    for (const auto& [name, value] : set) DI_CHECK(set_kernel_knob(config, name, value, &why), "{}", why);
    return b.execution().set_kernels(config);
}

inline std::string variant_label(const VariantSet& set) {
    std::string label;
    for (const auto& [name, value] : set) label += std::string(" ") + name + "=" + std::to_string(value);
    return label;
}

}  // namespace deepinfer::kernels::ops_test
