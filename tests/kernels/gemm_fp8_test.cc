// FP8 weights read as stored (core/quant_fp8.h): packing against the e4m3 definition and the
// checkpoint's block scales, what pack() refuses, and every GEMM path (scalar, AVX2, AVX-512;
// exact and fast; few and many activation rows) against the same product over the weights widened
// to bf16 at load, bitwise.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>

#include "base/thread_pool.h"
#include "core/dtype.h"
#include "core/quant_fp8.h"
#include "tests/kernels/gemm_test_util.h"
#include "tests/test_util.h"

namespace deepinfer::kernels {
namespace {

// Random e4m3 codes [n, k] (every code but the NaN ones, subnormals included) and power-of-two
// block scales 2^[lowest, lowest + 14] for blocks of `block` (rows, columns).
struct Fp8Checkpoint {
    Tensor codes, scales;
    std::array<int, 2> block;
};

Fp8Checkpoint random_fp8(int64_t n, int64_t k, std::array<int, 2> block, std::mt19937& rng, int lowest = -12) {
    Fp8Checkpoint c{Tensor::empty(DType::kF8E4M3, {n, k}),
                    Tensor::empty(DType::kF32, {(n + block[0] - 1) / block[0], (k + block[1] - 1) / block[1]}), block};
    for (int64_t i = 0; i < c.codes.numel(); ++i) {
        uint8_t code;
        do code = static_cast<uint8_t>(rng());
        while ((code & 0x7F) == 0x7F);
        c.codes.data<uint8_t>()[i] = code;
    }
    for (int64_t i = 0; i < c.scales.numel(); ++i)
        c.scales.data<float>()[i] = std::ldexp(1.0f, lowest + static_cast<int>(rng() % 15));
    return c;
}

// What the loader makes of them without FP8 kernels: each value times its scale, in bf16.
Tensor widened(const Fp8Checkpoint& c) {
    int64_t n = c.codes.dim(0), k = c.codes.dim(1);
    Tensor out = Tensor::empty(DType::kBF16, {n, k});
    for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < k; ++i) {
            float s = c.scales.data<float>()[(r / c.block[0]) * c.scales.dim(1) + i / c.block[1]];
            out.data<uint16_t>()[r * k + i] = f32_to_bf16(e4m3_to_f32(c.codes.data<uint8_t>()[r * k + i]) * s);
        }
    return out;
}

TEST(Fp8, PackedRowsStandForTheCheckpointsValues) {
    uint32_t seed = test::random_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (auto [n, k, br, bc] : std::vector<std::array<int64_t, 4>>{{7, 32, 128, 128}, {130, 320, 128, 128}, {9, 512, 4, 256}, {70, 96, 32, 32}}) {
        Fp8Checkpoint c = random_fp8(n, k, {static_cast<int>(br), static_cast<int>(bc)}, rng);
        ASSERT_TRUE(fp8::packable(c.codes, c.scales, c.block));
        Tensor w = fp8::pack(c.codes, c.scales, c.block);
        EXPECT_EQ(w.nbytes(), static_cast<size_t>(n * fp8::row_bytes(k)));
        Tensor back = fp8::dequantize(w), wide = widened(c);
        for (int64_t i = 0; i < back.numel(); ++i)
            ASSERT_EQ(f32_to_bf16(back.data<float>()[i]), wide.data<uint16_t>()[i]) << "n=" << n << " k=" << k << " i=" << i;
    }
}

TEST(Fp8, WeightsThatWouldNotDecodeExactlyAreNotPacked) {
    std::mt19937 rng(3);
    Fp8Checkpoint c = random_fp8(8, 64, {128, 128}, rng);
    EXPECT_TRUE(fp8::packable(c.codes, c.scales, c.block));
    EXPECT_FALSE(fp8::packable(c.codes, c.scales, {128, 48})) << "column blocks not a multiple of 32";
    auto refused_with_scale = [&](float s) {
        Fp8Checkpoint d = c;
        d.scales = test::copy_of(c.scales);
        d.scales.data<float>()[0] = s;
        return !fp8::packable(d.codes, d.scales, d.block);
    };
    EXPECT_TRUE(refused_with_scale(0.75f)) << "not a power of two";
    EXPECT_TRUE(refused_with_scale(std::ldexp(1.0f, -118))) << "values would turn subnormal";
    EXPECT_TRUE(refused_with_scale(std::ldexp(1.0f, 120))) << "values would overflow";
    EXPECT_TRUE(refused_with_scale(0.0f));
    EXPECT_FALSE(refused_with_scale(std::ldexp(1.0f, -117)));
    EXPECT_FALSE(refused_with_scale(std::ldexp(1.0f, 119)));
    Fp8Checkpoint nan = c;
    nan.codes = test::copy_of(c.codes);
    nan.codes.data<uint8_t>()[5] = 0xFF;
    EXPECT_FALSE(fp8::packable(nan.codes, nan.scales, nan.block)) << "a NaN code";
    Tensor odd = Tensor::zeros(DType::kF8E4M3, {4, 48}), one = Tensor::empty(DType::kF32, {1, 1});
    one.data<float>()[0] = 1.0f;
    EXPECT_FALSE(fp8::packable(odd, one, {128, 128})) << "k not a multiple of 32";
}

// The scales also come from the bottom of the range, where the smallest values are near the
// smallest normal number.
TEST(Fp8, ProductsHaveTheWidenedWeightsBits) {
    uint32_t seed = test::random_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    ThreadPool pool(3);
    for (int lowest : {-12, -117})
    for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 37, 64}, {4, 9, 160}, {7, 70, 320}, {33, 16, 128}}) {
        Fp8Checkpoint c = random_fp8(n, k, {32, n % 2 == 0 ? 128 : 32}, rng, lowest);
        Tensor packed = fp8::pack(c.codes, c.scales, c.block), wide = widened(c);
        Tensor x = test::random_f32({m, k}, rng), init = test::random_f32({m, n}, rng);
        SCOPED_TRACE(testing::Message() << "scales from 2^" << lowest);
        test::expect_packed_gives_widened_bits(pool, x, packed, wide, init);
    }
}

}  // namespace
}  // namespace deepinfer::kernels
