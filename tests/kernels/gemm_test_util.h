#pragma once
// Shared by the CPU GEMM tests: a product through cpu::gemm, and the check that weights read as
// stored (MXFP4, FP8) give the bits of the same weights widened to bf16 at load.
#include <gtest/gtest.h>

#include <cstring>

#include "base/thread_pool.h"
#include "kernels/cpu/gemm.h"
#include "tests/test_util.h"

namespace deepinfer::test {

// init (+)= x · wᵀ on `isa`, with the activations rounded to bf16 first when `fast`.
inline Tensor run_gemm(Isa isa, ThreadPool& pool, const Tensor& x, const Tensor& w, bool accumulate, bool fast,
                       const Tensor& init) {
    Tensor y = copy_of(init);
    kernels::cpu::GemmArgs a{.x = x.data<float>(), .lda = x.dim(1), .w = w.raw(), .ldw = w.dim(1), .w_dtype = w.dtype(),
                             .y = y.data<float>(), .ldy = y.dim(1), .m = x.dim(0), .n = w.dim(0), .k = w.dim(1),
                             .accumulate = accumulate, .bf16_activations = fast};
    kernels::cpu::gemm(pool, isa, a);
    return y;
}

// Exact and fast, set and accumulated, on every ISA but AVX2 (which decodes packed weights through
// the scalar path but sums bf16 ones in its own order).
inline void expect_packed_gives_widened_bits(ThreadPool& pool, const Tensor& x, const Tensor& packed, const Tensor& widened,
                                             const Tensor& init) {
    for (Isa isa : supported_isas()) {
        if (isa == Isa::kAvx2) continue;
        for (bool accumulate : {false, true})
            for (bool fast : {false, true}) {
                SCOPED_TRACE(testing::Message() << isa_name(isa) << " m=" << x.dim(0) << " n=" << packed.dim(0)
                                                << " k=" << x.dim(1) << " accumulate " << accumulate << " fast " << fast);
                Tensor a = run_gemm(isa, pool, x, packed, accumulate, fast, init);
                Tensor b = run_gemm(isa, pool, x, widened, accumulate, fast, init);
                EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
            }
    }
}

}  // namespace deepinfer::test
