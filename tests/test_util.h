#pragma once
// Helpers shared by the tests: random tensors and tolerant comparisons.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "core/tensor.h"
#include "deepinfer/config.h"

namespace deepinfer::test {

// The environment may point at a copy of tests/data (binaries run from another tree, e.g. on a GPU machine).
inline std::string data_path(const std::string& rel) {
    const char* moved = std::getenv("DEEPINFER_TEST_DATA");
    return std::string(moved && *moved ? moved : DEEPINFER_TEST_DATA) + "/" + rel;
}

// The device the engine tests run on: DEEPINFER_TEST_DEVICE (e.g. "cuda"), else the CPU.
inline std::string device() {
    const char* d = std::getenv("DEEPINFER_TEST_DEVICE");
    return d && *d ? d : "cpu";
}

// The model settings of engine tests whose expectations compare outputs across schedules: the
// test device, in the exact precision (the fast precision, CUDA's default, rounds activations to
// bf16, so greedy tokens of random weights, or near ties of trained ones, vary with the batch).
inline void on_test_device(ModelConfig& m) {
    m.device = device();
    m.precision = "exact";
}

// Every CPU instruction-set level this machine runs, scalar first.
inline std::vector<Isa> supported_isas() {
    std::vector<Isa> out = {Isa::kScalar};
    if (detect_isa() >= Isa::kAvx2) out.push_back(Isa::kAvx2);
    if (detect_isa() >= Isa::kAvx512) out.push_back(Isa::kAvx512);
    return out;
}

// A fresh seed per run (tests print it in a trace), or DEEPINFER_TEST_SEED to replay one.
inline uint32_t random_seed() {
    if (const char* s = std::getenv("DEEPINFER_TEST_SEED")) return static_cast<uint32_t>(std::strtoul(s, nullptr, 10));
    return std::random_device{}();
}

inline Tensor random_f32(std::vector<int64_t> shape, std::mt19937& rng, float scale = 1.0f) {
    Tensor t = Tensor::empty(DType::kF32, std::move(shape));
    std::normal_distribution<float> dist(0.0f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
    return t;
}

inline Tensor random_bf16(std::vector<int64_t> shape, std::mt19937& rng, float scale = 1.0f) {
    Tensor t = Tensor::empty(DType::kBF16, std::move(shape));
    std::normal_distribution<float> dist(0.0f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<uint16_t>()[i] = f32_to_bf16(dist(rng));
    return t;
}

inline Tensor copy_of(const Tensor& t) {
    Tensor c = Tensor::empty(t.dtype(), t.shape());
    std::memcpy(c.raw(), t.raw(), t.nbytes());
    return c;
}

// max |a - b| <= atol + rtol * max |b|, reporting the worst element.
inline ::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double rtol, double atol = 0.0) {
    if (a.numel() != b.numel()) return ::testing::AssertionFailure() << "sizes " << a.numel() << " vs " << b.numel();
    double worst = 0.0, ref_max = 0.0;
    int64_t at = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
        double d = std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]);
        if (!(d <= worst)) {
            worst = d;
            at = i;
        }
        ref_max = std::max(ref_max, std::fabs(static_cast<double>(b.data<float>()[i])));
    }
    double limit = atol + rtol * ref_max;
    if (worst <= limit) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "max |diff| " << worst << " at " << at << " (" << a.data<float>()[at]
                                         << " vs " << b.data<float>()[at] << ") exceeds " << limit
                                         << " (max |ref| " << ref_max << ")";
}

}  // namespace deepinfer::test
