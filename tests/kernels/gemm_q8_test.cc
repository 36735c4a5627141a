// Q8 weights (core/quant_q8.h) and the Q8 GEMM kernels: the quantizer's rounding bound, every
// kernel variant against a double-precision product of the dequantized operands, and a row's
// result being bitwise the same whatever batch it is computed in.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "base/thread_pool.h"
#include "core/quant_q8.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_q8.h"
#include "tests/test_util.h"

namespace deepinfer::kernels {
namespace {

// Weights whose blocks span very different magnitudes, with an all-zero block in every row.
Tensor uneven_weights(int64_t n, int64_t k, std::mt19937& rng) {
    Tensor w = test::random_bf16({n, k}, rng);
    std::uniform_real_distribution<float> exponent(-12.0f, 4.0f);
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t b = 0; b * q8::kBlock < k; ++b) {
            float scale = b == 1 ? 0.0f : std::exp2(exponent(rng));
            for (int64_t i = b * q8::kBlock; i < std::min(k, (b + 1) * q8::kBlock); ++i) {
                uint16_t& v = w.data<uint16_t>()[r * k + i];
                v = f32_to_bf16(bf16_to_f32(v) * scale);
            }
        }
    }
    return w;
}

std::vector<Isa> q8_isas() {
    std::vector<Isa> out = {Isa::kScalar};
    if (detect_isa() >= Isa::kAvx512 && cpu::cpu_has_avx512_vnni()) out.push_back(Isa::kAvx512);
    return out;
}

Tensor run_q8(Isa isa, ThreadPool& pool, const Tensor& x, const Tensor& wq, bool accumulate, const Tensor& init) {
    Tensor y = test::copy_of(init);
    cpu::GemmArgs a{.x = x.data<float>(), .lda = x.dim(1), .w = wq.raw(), .ldw = wq.dim(1), .w_dtype = DType::kQ8,
                    .y = y.data<float>(), .ldy = y.dim(1), .m = x.dim(0), .n = wq.dim(0), .k = wq.dim(1),
                    .accumulate = accumulate};
    cpu::gemm(pool, isa, a);
    return y;
}

// x rows as the kernels see them: quantized and dequantized with the weights' rounding.
Tensor dequantized_activations(const Tensor& x) {
    int64_t m = x.dim(0), k = x.dim(1), blocks = q8::padded_blocks(k);
    Tensor out = Tensor::empty(DType::kF32, {m, k});
    std::vector<int8_t> codes(blocks * q8::kBlock);
    std::vector<float> scales(blocks);
    for (int64_t r = 0; r < m; ++r) {
        q8::quantize_row(x.data<float>() + r * k, k, codes.data(), scales.data());
        for (int64_t i = 0; i < k; ++i) out.data<float>()[r * k + i] = codes[i] * scales[i / q8::kBlock];
    }
    return out;
}

TEST(Q8, QuantizeRoundsWithinHalfAStep) {
    std::mt19937 rng(11);
    for (int64_t k : {1, 31, 32, 33, 100, 257, 1024}) {
        Tensor w = uneven_weights(5, k, rng);
        Tensor back = q8::dequantize(q8::quantize(w));
        for (int64_t r = 0; r < 5; ++r) {
            for (int64_t b = 0; b * q8::kBlock < k; ++b) {
                int64_t begin = b * q8::kBlock, end = std::min(k, begin + q8::kBlock);
                float amax = 0;
                for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(bf16_to_f32(w.data<uint16_t>()[r * k + i])));
                for (int64_t i = begin; i < end; ++i) {
                    float v = bf16_to_f32(w.data<uint16_t>()[r * k + i]), got = back.data<float>()[r * k + i];
                    ASSERT_LE(std::fabs(got - v), amax / 127.0f * 0.5f * (1 + 1e-5f) + 1e-30f) << "k=" << k << " i=" << i;
                    if (amax == 0) ASSERT_EQ(got, 0.0f);
                }
            }
        }
    }
}

TEST(Q8, EveryKernelMatchesTheDequantizedProduct) {
    std::mt19937 rng(12);
    ThreadPool pool(3);
    for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {1, 37, 100}, {3, 5, 17}, {4, 8, 64}, {5, 9, 33},
                                                             {7, 64, 48}, {17, 130, 257}, {64, 40, 512}, {1, 300, 1024}}) {
        Tensor w = uneven_weights(n, k, rng);
        Tensor wq = q8::quantize(w), wd = q8::dequantize(wq);
        Tensor x = test::random_f32({m, k}, rng), xd = dequantized_activations(x);
        Tensor init = test::random_f32({m, n}, rng);
        Tensor expect = Tensor::empty(DType::kF32, {m, n}), expect_acc = Tensor::empty(DType::kF32, {m, n});
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
                double s = 0;
                for (int64_t c = 0; c < k; ++c) s += double(xd.data<float>()[i * k + c]) * wd.data<float>()[j * k + c];
                expect.data<float>()[i * n + j] = static_cast<float>(s);
                expect_acc.data<float>()[i * n + j] = static_cast<float>(s + init.data<float>()[i * n + j]);
            }
        }
        for (Isa isa : q8_isas()) {
            SCOPED_TRACE(testing::Message() << isa_name(isa) << " m=" << m << " n=" << n << " k=" << k);
            EXPECT_TRUE(test::all_close(run_q8(isa, pool, x, wq, false, init), expect, 1e-4, 1e-5));
            EXPECT_TRUE(test::all_close(run_q8(isa, pool, x, wq, true, init), expect_acc, 1e-4, 1e-5));
        }
    }
}

TEST(Q8, ARowGivesTheSameBitsInEveryBatch) {
    std::mt19937 rng(13);
    int64_t n = 70, k = 320;
    Tensor wq = q8::quantize(test::random_bf16({n, k}, rng));
    Tensor x = test::random_f32({9, k}, rng), zero = Tensor::zeros(DType::kF32, {9, n});
    ThreadPool one(1), three(3);
    for (Isa isa : q8_isas()) {
        Tensor batch = run_q8(isa, three, x, wq, false, zero);
        for (int64_t i = 0; i < 9; ++i) {
            Tensor alone = run_q8(isa, one, x.rows(i, i + 1), wq, false, zero.rows(i, i + 1));
            EXPECT_EQ(std::memcmp(alone.raw(), batch.rows(i, i + 1).raw(), alone.nbytes()), 0)
                << isa_name(isa) << " row " << i;
        }
    }
}

}  // namespace
}  // namespace deepinfer::kernels
