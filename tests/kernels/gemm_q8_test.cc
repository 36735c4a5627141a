// Q8 and MXFP4 weights (core/quant_q8.h, core/quant_mxfp4.h) and the GEMM kernels that multiply
// them by 8-bit activations: the quantizer's rounding bound, MXFP4 packing against the e2m1
// definition, every kernel variant against a double-precision product of the dequantized
// operands, and a row's result being bitwise the same whatever batch it is computed in.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <array>
#include <random>

#include "base/thread_pool.h"
#include "core/quant_mxfp4.h"
#include "core/quant_q8.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_q8.h"
#include "tests/kernels/gemm_test_util.h"
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

// Random MXFP4 weights [n, k] as a checkpoint stores them: codes two a byte (even input in the
// low nibble) and power-of-two scales 2^[lowest, lowest + 8], which `values` receives as fp32 [n, k].
Tensor random_mxfp4(int64_t n, int64_t k, std::mt19937& rng, Tensor& values, int lowest = -6) {
    Tensor codes = Tensor::empty(DType::kU8, {n, k / 2}), scales = Tensor::empty(DType::kF32, {n, k / 32});
    for (int64_t i = 0; i < codes.numel(); ++i) codes.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
    for (int64_t i = 0; i < scales.numel(); ++i) scales.data<float>()[i] = std::ldexp(1.0f, static_cast<int>(rng() % 9) + lowest);
    values = Tensor::empty(DType::kF32, {n, k});
    for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c) {
            uint8_t byte = codes.data<uint8_t>()[r * (k / 2) + c / 2];
            values.data<float>()[r * k + c] =
                mxfp4::kE2m1[c % 2 == 0 ? byte & 0xF : byte >> 4] * scales.data<float>()[r * (k / 32) + c / 32];
        }
    return mxfp4::pack(codes, scales, k);
}

Tensor run_q8(Isa isa, ThreadPool& pool, const Tensor& x, const Tensor& wq, bool accumulate, const Tensor& init) {
    Tensor y = test::copy_of(init);
    cpu::GemmArgs a{.x = x.data<float>(), .lda = x.dim(1), .w = wq.raw(), .ldw = wq.dim(1), .w_dtype = wq.dtype(),
                    .y = y.data<float>(), .ldy = y.dim(1), .m = x.dim(0), .n = wq.dim(0), .k = wq.dim(1),
                    .accumulate = accumulate, .q8_activations = true};
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
                    if (amax == 0) {
                        ASSERT_EQ(got, 0.0f);
                    }
                }
            }
        }
    }
}

TEST(Mxfp4, PackedRowsStandForTheCheckpointsValues) {
    std::mt19937 rng(14);
    for (int64_t k : {32, 64, 96, 1024}) {
        Tensor values;
        Tensor w = random_mxfp4(7, k, rng, values);
        EXPECT_EQ(w.nbytes(), static_cast<size_t>(7 * mxfp4::row_bytes(k)));
        Tensor back = mxfp4::dequantize(w);
        EXPECT_EQ(std::memcmp(back.raw(), values.raw(), values.nbytes()), 0) << "k=" << k;
    }
}

TEST(Mxfp4, ScalesThatWouldNotDecodeExactlyAreNotPacked) {
    Tensor scales = Tensor::empty(DType::kF32, {2, 2});
    auto packable_with = [&](float s) {
        for (int64_t i = 0; i < 4; ++i) scales.data<float>()[i] = 0.25f;
        scales.data<float>()[3] = s;
        return mxfp4::packable(scales);
    };
    EXPECT_TRUE(packable_with(1.0f));
    EXPECT_TRUE(packable_with(std::ldexp(1.0f, -125)));
    EXPECT_TRUE(packable_with(std::ldexp(1.0f, 125)));
    EXPECT_FALSE(packable_with(std::ldexp(1.0f, -126))) << "the smallest values would be subnormal";
    EXPECT_FALSE(packable_with(std::ldexp(1.0f, 126))) << "the largest values would overflow bf16's decode";
    EXPECT_FALSE(packable_with(0.75f)) << "not a power of two";
    EXPECT_FALSE(packable_with(0.0f));
    EXPECT_FALSE(packable_with(-0.5f));
}

// Both weight formats the 8-bit kernels take, made from random data of shape [n, k].
struct Weights {
    Tensor stored, values;
};
std::vector<Weights> weight_formats(int64_t n, int64_t k, std::mt19937& rng) {
    std::vector<Weights> out;
    Tensor q = q8::quantize(uneven_weights(n, k, rng));
    out.push_back({q, q8::dequantize(q)});
    if (k % 32 == 0) {
        Tensor values;
        Tensor f = random_mxfp4(n, k, rng, values);
        out.push_back({f, values});
    }
    return out;
}

TEST(Q8, EveryKernelMatchesTheDequantizedProduct) {
    std::mt19937 rng(12);
    ThreadPool pool(3);
    for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {1, 37, 100}, {3, 5, 17}, {4, 8, 64}, {5, 9, 33},
                                                             {7, 64, 48}, {17, 130, 257}, {64, 40, 512}, {1, 300, 1024},
                                                             {2, 19, 96}, {6, 33, 32}}) {
      for (const Weights& f : weight_formats(n, k, rng)) {
        const Tensor& wq = f.stored;
        const Tensor& wd = f.values;
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
            SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(wq.dtype()) << " m=" << m << " n=" << n
                                            << " k=" << k);
            EXPECT_TRUE(test::all_close(run_q8(isa, pool, x, wq, false, init), expect, 1e-4, 1e-5));
            EXPECT_TRUE(test::all_close(run_q8(isa, pool, x, wq, true, init), expect_acc, 1e-4, 1e-5));
        }
      }
    }
}

// MXFP4 weights read as stored, with fp32 activations (exact) or bf16 ones (fast): the kernels
// decode each value exactly, so the product has the bits of the same product over the weights
// widened to bf16 at load (what the loader did before), on the scalar and AVX-512 paths alike,
// for few activation rows (decoded in registers) and many (decoded once per block of rows). The
// scales also come from the bottom of the range pack() takes, where the smallest values are the
// smallest normal numbers.
TEST(Mxfp4, DecodedInRegistersGivesTheWidenedWeightsBits) {
    uint32_t seed = test::random_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    ThreadPool pool(3);
    for (int lowest : {-6, -125})
    for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 37, 64}, {4, 9, 96}, {7, 70, 320}, {33, 16, 128}}) {
        SCOPED_TRACE(testing::Message() << "scales from 2^" << lowest);
        Tensor values, x = test::random_f32({m, k}, rng), init = test::random_f32({m, n}, rng);
        Tensor packed = random_mxfp4(n, k, rng, values, lowest), widened = Tensor::empty(DType::kBF16, {n, k});
        for (int64_t i = 0; i < values.numel(); ++i) widened.data<uint16_t>()[i] = f32_to_bf16(values.data<float>()[i]);
        test::expect_packed_gives_widened_bits(pool, x, packed, widened, init);
    }
}

TEST(Q8, ARowGivesTheSameBitsInEveryBatch) {
    std::mt19937 rng(13);
    int64_t n = 70, k = 320;
    Tensor x = test::random_f32({9, k}, rng), zero = Tensor::zeros(DType::kF32, {9, n});
    ThreadPool one(1), three(3);
    for (const Weights& f : weight_formats(n, k, rng))
    for (Isa isa : q8_isas()) {
        const Tensor& wq = f.stored;
        Tensor batch = run_q8(isa, three, x, wq, false, zero);
        for (int64_t i = 0; i < 9; ++i) {
            Tensor alone = run_q8(isa, one, x.rows(i, i + 1), wq, false, zero.rows(i, i + 1));
            EXPECT_EQ(std::memcmp(alone.raw(), batch.rows(i, i + 1).raw(), alone.nbytes()), 0)
                << isa_name(isa) << " " << dtype_name(wq.dtype()) << " row " << i;
        }
    }
}

}  // namespace
}  // namespace deepinfer::kernels

namespace deepinfer::kernels {
namespace {

// The experts of a MoE layer run as one gemm_batch: each product's rows must be bitwise what a
// gemm of its own gives, whatever the weight format or precision and however the rows fall across
// threads.
TEST(Gemm, BatchGivesEachProductsOwnBits) {
    std::mt19937 rng(15);
    ThreadPool pool(3);
    std::vector<Tensor> xs, ws, alone, together;
    std::vector<cpu::GemmArgs> products;
    int64_t shapes[][3] = {{1, 40, 64}, {3, 17, 96}, {1, 64, 128}, {5, 33, 64}, {2, 8, 32}, {6, 21, 96}};
    for (size_t p = 0; p < std::size(shapes); ++p) {
        auto [m, n, k] = shapes[p];
        Tensor values;
        xs.push_back(test::random_f32({m, k}, rng));
        ws.push_back(p % 3 == 0 ? test::random_bf16({n, k}, rng)
                                : p % 3 == 1 ? q8::quantize(test::random_bf16({n, k}, rng)) : random_mxfp4(n, k, rng, values));
        alone.push_back(Tensor::zeros(DType::kF32, {m, n}));
        together.push_back(Tensor::zeros(DType::kF32, {m, n}));
    }
    for (size_t p = 0; p < xs.size(); ++p) {
        const Tensor &x = xs[p], &w = ws[p];
        auto args = [&](Tensor& y) {
            return cpu::GemmArgs{.x = x.data<float>(), .lda = x.dim(1), .w = w.raw(), .ldw = w.dim(1), .w_dtype = w.dtype(),
                                 .y = y.data<float>(), .ldy = y.dim(1), .m = x.dim(0), .n = w.dim(0), .k = w.dim(1),
                                 .bf16_activations = p == 3,  // one bf16 product in the fast precision
                                 .q8_activations = p == 2};   // one MXFP4 product each way
        };
        cpu::gemm(pool, detect_isa(), args(alone[p]));
        products.push_back(args(together[p]));
    }
    cpu::gemm_batch(pool, detect_isa(), products);
    for (size_t p = 0; p < xs.size(); ++p)
        EXPECT_EQ(std::memcmp(alone[p].raw(), together[p].raw(), alone[p].nbytes()), 0) << "product " << p;
}

}  // namespace
}  // namespace deepinfer::kernels
