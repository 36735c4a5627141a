// The fast precision's GEMM (activations rounded to bf16, kernels/cpu/gemm_bf16.h): every path
// the CPU has (AVX-512 BF16 dot products, and the rounded activations through the fp32 kernels of
// each ISA) against a double-precision product of the rounded activations, on random shapes with
// k remainders; the rounding itself against the scalar round-to-nearest-even; and a row's bits
// independent of the batch and the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "base/thread_pool.h"
#include "core/dtype.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "tests/kernels/gemm_test_util.h"
#include "tests/test_util.h"

namespace deepinfer::kernels {
namespace {

Tensor run_fast(Isa isa, ThreadPool& pool, const Tensor& x, const Tensor& w, bool accumulate, const Tensor& init) {
    return test::run_gemm(isa, pool, x, w, accumulate, true, init);
}

// y = x · wᵀ in double, with x rounded to bf16 first or not; `bound` gets Σ|x||w| per entry.
Tensor reference(const Tensor& x, const Tensor& w, bool round, std::vector<double>* bound = nullptr) {
    int64_t m = x.dim(0), n = w.dim(0), k = x.dim(1);
    Tensor y = Tensor::empty(DType::kF32, {m, n});
    if (bound) bound->assign(static_cast<size_t>(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double s = 0, b = 0;
            for (int64_t t = 0; t < k; ++t) {
                float xv = x.data<float>()[i * k + t];
                double a = round ? bf16_to_f32(f32_to_bf16(xv)) : xv, wv = bf16_to_f32(w.data<uint16_t>()[j * k + t]);
                s += a * wv;
                b += std::fabs(a * wv);
            }
            y.data<float>()[i * n + j] = static_cast<float>(s);
            if (bound) (*bound)[i * n + j] = b;
        }
    return y;
}

TEST(Bf16Gemm, EveryPathIsTheProductOfTheRoundedActivations) {
    uint32_t seed = test::random_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    ThreadPool pool(3);
    bool rounding_seen = false;
    for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {1, 37, 100}, {3, 5, 17}, {4, 4, 32}, {5, 9, 33},
                                                             {7, 64, 48}, {17, 130, 257}, {64, 40, 512}}) {
        Tensor x = test::random_f32({m, k}, rng), w = test::random_bf16({n, k}, rng), init = test::random_f32({m, n}, rng);
        std::vector<double> bound;
        Tensor rounded = reference(x, w, true, &bound), unrounded = reference(x, w, false);
        for (Isa isa : test::supported_isas()) {
            SCOPED_TRACE(testing::Message() << isa_name(isa) << " m=" << m << " n=" << n << " k=" << k);
            Tensor set = run_fast(isa, pool, x, w, false, init), added = run_fast(isa, pool, x, w, true, init);
            for (int64_t i = 0; i < m * n; ++i) {
                // fp32 accumulation of exact products: a few ulps of the magnitude summed.
                double tol = 1e-6 * bound[i] + 1e-7;
                ASSERT_NEAR(set.data<float>()[i], rounded.data<float>()[i], tol) << "entry " << i;
                ASSERT_NEAR(added.data<float>()[i], rounded.data<float>()[i] + init.data<float>()[i],
                            tol + 1e-6 * std::fabs(init.data<float>()[i]))
                    << "entry " << i;
                rounding_seen |= std::fabs(rounded.data<float>()[i] - unrounded.data<float>()[i]) > 10 * tol;
            }
        }
    }
    EXPECT_TRUE(rounding_seen) << "no shape told rounded from unrounded activations apart";
}

TEST(Bf16Gemm, RoundingIsNearestEven) {
    uint32_t seed = test::random_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    int64_t m = 3, k = 77;
    Tensor x = test::random_f32({m, k}, rng, 3.0f);
    // Exact ties between two bf16 values, odd and even below, and values just off them.
    uint32_t ties[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x40408001u, 0x3f807fffu};
    for (size_t i = 0; i < std::size(ties); ++i) std::memcpy(x.data<float>() + 5 * i, &ties[i], 4);
    int64_t stride = cpu::bf16_activation_stride(k);
    std::vector<uint16_t> got(static_cast<size_t>(m * stride), 0xFFFF);
    cpu::round_activations_bf16(x.data<float>(), k, k, 0, m, got.data());
    for (int64_t r = 0; r < m; ++r) {
        for (int64_t i = 0; i < k; ++i) ASSERT_EQ(got[r * stride + i], f32_to_bf16(x.data<float>()[r * k + i])) << r << "," << i;
        for (int64_t i = k; i < stride; ++i) ASSERT_EQ(got[r * stride + i], 0) << "padding " << r << "," << i;
    }
}

TEST(Bf16Gemm, ARowGivesTheSameBitsInEveryBatch) {
    uint32_t seed = test::random_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    int64_t n = 70, k = 330;
    Tensor x = test::random_f32({9, k}, rng), w = test::random_bf16({n, k}, rng), zero = Tensor::zeros(DType::kF32, {9, n});
    ThreadPool one(1), three(3);
    for (Isa isa : test::supported_isas()) {
        Tensor batch = run_fast(isa, three, x, w, false, zero);
        for (int64_t i = 0; i < 9; ++i) {
            Tensor alone = run_fast(isa, one, x.rows(i, i + 1), w, false, zero.rows(i, i + 1));
            EXPECT_EQ(std::memcmp(alone.raw(), batch.rows(i, i + 1).raw(), alone.nbytes()), 0) << isa_name(isa) << " row " << i;
        }
    }
}

}  // namespace
}  // namespace deepinfer::kernels
