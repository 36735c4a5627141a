// Every GEMM variant the CPU supports against the double-precision reference, on random data with
// shapes that exercise the register-tile edges and the k remainders.
#include <gtest/gtest.h>

#include <random>

#include "base/thread_pool.h"
#include "kernels/cpu/gemm.h"
#include "kernels/ref/ref_backend.h"
#include "tests/test_util.h"

namespace deepinfer::kernels {
namespace {

Tensor run_gemm(Isa isa, ThreadPool& pool, const Tensor& x, const Tensor& w, bool accumulate, const Tensor& init) {
    Tensor y = test::copy_of(init);
    cpu::GemmArgs a{.x = x.data<float>(), .lda = x.dim(1), .w = w.raw(), .ldw = w.dim(1), .w_dtype = w.dtype(),
                    .y = y.data<float>(), .ldy = y.dim(1), .m = x.dim(0), .n = w.dim(0), .k = w.dim(1),
                    .accumulate = accumulate};
    cpu::gemm(pool, isa, a);
    return y;
}

TEST(Gemm, AllVariantsMatchReference) {
    std::mt19937 rng(1);
    ThreadPool pool(3);
    auto ref = make_reference_backend();
    for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {1, 37, 100}, {3, 5, 17}, {4, 4, 16}, {5, 9, 33},
                                                             {7, 64, 48}, {17, 130, 257}, {64, 40, 512}}) {
        for (DType wt : {DType::kBF16, DType::kF32}) {
            Tensor x = test::random_f32({m, k}, rng);
            Tensor w = wt == DType::kBF16 ? test::random_bf16({n, k}, rng) : test::random_f32({n, k}, rng);
            Tensor init = test::random_f32({m, n}, rng);
            Tensor expect = Tensor::empty(DType::kF32, {m, n});
            ref->matmul(x, w, expect);
            Tensor expect_acc = test::copy_of(expect);
            for (int64_t i = 0; i < m * n; ++i) expect_acc.data<float>()[i] += init.data<float>()[i];
            for (Isa isa : test::supported_isas()) {
                SCOPED_TRACE(testing::Message() << isa_name(isa) << " m=" << m << " n=" << n << " k=" << k << " "
                                                << dtype_name(wt));
                EXPECT_TRUE(test::all_close(run_gemm(isa, pool, x, w, false, init), expect, 1e-5, 1e-5));
                EXPECT_TRUE(test::all_close(run_gemm(isa, pool, x, w, true, init), expect_acc, 1e-5, 1e-5));
            }
        }
    }
}

TEST(Gemm, ThreadCountDoesNotChangeResults) {
    std::mt19937 rng(2);
    Tensor x = test::random_f32({9, 300}, rng), w = test::random_bf16({77, 300}, rng), z = Tensor::zeros(DType::kF32, {9, 77});
    ThreadPool one(1), four(4);
    Isa isa = detect_isa();
    Tensor a = run_gemm(isa, one, x, w, false, z), b = run_gemm(isa, four, x, w, false, z);
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);  // bitwise: the batch-invariance we rely on
}

}  // namespace
}  // namespace deepinfer::kernels
