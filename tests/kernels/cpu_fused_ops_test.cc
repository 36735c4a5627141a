// The CPU backend's fused ops (one pool dispatch for several products or norm / rope jobs) give
// the bits of the ops they stand for, called one by one through the Backend defaults: on every
// instruction set, in both precisions and with 8-bit weights, on random shapes and positions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/quant_q8.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/test_util.h"

namespace deepinfer::kernels {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) { return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0; }

Tensor rope_freqs(int rope_dim) {
    Tensor t = Tensor::empty(DType::kF32, {rope_dim / 2});
    for (int i = 0; i < rope_dim / 2; ++i) t.data<float>()[i] = std::pow(10000.0f, -2.0f * i / rope_dim);
    return t;
}

class CpuFusedOps : public ::testing::TestWithParam<Isa> {
protected:
    void SetUp() override {
        if (GetParam() > detect_isa()) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
        seed = test::random_seed();
        rng.seed(seed);
    }
    uint32_t seed = 0;
    std::mt19937 rng;
};

TEST_P(CpuFusedOps, MatmulManyIsEachMatmul) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    for (MatmulPrecision precision : {MatmulPrecision::kFp32, MatmulPrecision::kBf16})
    for (bool q8 : {false, true})
    for (int64_t m : {1, 3, 37}) {
        SCOPED_TRACE(testing::Message() << "m=" << m << " fast " << (precision == MatmulPrecision::kBf16) << " q8 " << q8);
        auto cpu = cpu::make_cpu_backend(3, GetParam());
        cpu->execution().set_matmul_precision(precision);
        int64_t k = 64 + 32 * static_cast<int64_t>(rng() % 4);
        Tensor x = test::random_f32({m, k}, rng);
        std::vector<Tensor> ws, fused, alone;
        for (int64_t n : {24, 7, 130}) {
            Tensor w = test::random_bf16({n, k}, rng);
            ws.push_back(q8 ? q8::quantize(w) : w);
            fused.push_back(Tensor::zeros(DType::kF32, {m, n}));
            alone.push_back(Tensor::zeros(DType::kF32, {m, n}));
        }
        std::vector<MatmulTarget> together, apart;
        for (size_t i = 0; i < ws.size(); ++i) {
            together.push_back({&ws[i], &fused[i]});
            apart.push_back({&ws[i], &alone[i]});
        }
        cpu->matmul_many(x, together);
        cpu->Backend::matmul_many(x, apart);  // the default: one matmul after another
        for (size_t i = 0; i < ws.size(); ++i) EXPECT_TRUE(same_bits(fused[i], alone[i])) << "product " << i;
    }
}

TEST_P(CpuFusedOps, NormRopeManyIsEachNormAndRope) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto cpu = cpu::make_cpu_backend(3, GetParam());
    int64_t n = 1 + static_cast<int64_t>(rng() % 9);
    Tensor pos = Tensor::empty(DType::kI64, {n});
    for (int64_t i = 0; i < n; ++i) pos.data<int64_t>()[i] = static_cast<int64_t>(rng() % 5000);
    Rope rope_a{rope_freqs(16), 16, 1.0f}, rope_b{rope_freqs(8), 8, 0.7f};
    Tensor weight = test::random_f32({48}, rng);
    // q-like (4 heads a position, norm + rope), kv-like (norm with weight + rope), a bare norm, a bare rope.
    std::vector<Tensor> xs = {test::random_f32({n, 4, 32}, rng), test::random_f32({n, 48}, rng),
                              test::random_f32({n, 2, 40}, rng), test::random_f32({n, 24}, rng)};
    std::vector<Tensor> ys;
    for (const Tensor& x : xs) ys.push_back(test::copy_of(x));
    auto jobs_on = [&](std::vector<Tensor>& t) {
        return std::vector<NormRopeJob>{{&t[0], true, nullptr, 1e-6f, &rope_a, 4},
                                        {&t[1], true, &weight, 1e-5f, &rope_b, 1},
                                        {&t[2], true, nullptr, 1e-6f, nullptr, 1},
                                        {&t[3], false, nullptr, 1e-6f, &rope_b, 1}};
    };
    std::vector<NormRopeJob> fused = jobs_on(xs), apart = jobs_on(ys);
    cpu->norm_rope_many(fused, pos);
    cpu->Backend::norm_rope_many(apart, pos);  // the default: rms_norm, then rope, job by job
    for (size_t i = 0; i < xs.size(); ++i) EXPECT_TRUE(same_bits(xs[i], ys[i])) << "job " << i;
}

INSTANTIATE_TEST_SUITE_P(Isas, CpuFusedOps, ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
}  // namespace deepinfer::kernels
