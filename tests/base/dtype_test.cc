#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace deepinfer {
namespace {

TEST(DType, Bf16RoundTripsAndRoundsToNearestEven) {
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0, 100);
    for (int i = 0; i < 10000; ++i) {
        float f = dist(rng);
        float r = bf16_to_f32(f32_to_bf16(f));
        EXPECT_LE(std::fabs(r - f), std::fabs(f) * (1.0f / 256));  // 8 mantissa bits
        EXPECT_EQ(f32_to_bf16(r), f32_to_bf16(f));
    }
    EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), f32_to_bf16(1.0f));  // tie goes to even
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16RoundTripsEveryHalf) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        float f = f16_to_f32(static_cast<uint16_t>(h));
        if (std::isnan(f)) continue;
        EXPECT_EQ(f32_to_f16(f), h) << h;
    }
    EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
    EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
}

TEST(DType, E4m3MatchesTheFormat) {
    EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);      // exponent 7 = bias
    EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);    // largest finite
    EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
    EXPECT_EQ(e4m3_to_f32(0xB8), -1.0f);
    EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)));
    EXPECT_TRUE(std::isnan(e4m3_to_f32(0xFF)));
    for (int v = 0; v < 0x7E; ++v) EXPECT_LT(e4m3_to_f32(v), e4m3_to_f32(v + 1)) << v;  // monotonic
}

TEST(DType, NamesRoundTrip) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kI64, DType::kI32})
        EXPECT_EQ(parse_dtype(dtype_name(t)), t);
    EXPECT_EQ(parse_dtype("F4"), DType::kUnknown);
}

}  // namespace
}  // namespace deepinfer
