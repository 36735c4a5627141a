#include "core/dtype.h"

#include <cmath>

#include "core/quant_fp8.h"
#include "core/quant_mxfp4.h"
#include "core/quant_q8.h"

namespace deepinfer {
namespace {

struct DTypeInfo {
    DType dtype;
    const char* name;
    size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "F32", 4},   {DType::kF16, "F16", 2},    {DType::kBF16, "BF16", 2},
    {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF64, "F64", 8}, {DType::kI64, "I64", 8},
    {DType::kI32, "I32", 4},   {DType::kI16, "I16", 2},    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},     {DType::kBool, "BOOL", 1}, {DType::kF8E8M0, "F8_E8M0", 1},
};

}  // namespace

size_t dtype_size(DType dtype) {
    for (const auto& info : kDTypes)
        if (info.dtype == dtype) return info.size;
    return 0;
}

size_t dtype_row_bytes(DType dtype, int64_t row_elems) {
    if (dtype == DType::kQ8) return static_cast<size_t>(q8::row_bytes(row_elems));
    if (dtype == DType::kMxfp4) return static_cast<size_t>(mxfp4::row_bytes(row_elems));
    if (dtype == DType::kFp8) return static_cast<size_t>(fp8::row_bytes(row_elems));
    return static_cast<size_t>(row_elems) * dtype_size(dtype);
}

const char* dtype_name(DType dtype) {
    if (dtype == DType::kQ8) return "Q8_32";
    if (dtype == DType::kMxfp4) return "MXFP4_32";
    if (dtype == DType::kFp8) return "FP8_E4M3_128";
    for (const auto& info : kDTypes)
        if (info.dtype == dtype) return info.name;
    return "unknown";
}

DType parse_dtype(std::string_view name) {
    for (const auto& info : kDTypes)
        if (name == info.name) return info.dtype;
    return DType::kUnknown;
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: renormalise
            exp = 127 - 15 + 1;
            while ((mant & 0x400u) == 0) {
                mant <<= 1;
                --exp;
            }
            bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    uint32_t sign = (bits >> 16) & 0x8000u;
    int32_t exp = static_cast<int32_t>((bits >> 23) & 0xff) - 127 + 15;
    uint32_t mant = bits & 0x7fffffu;
    if (((bits >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
    if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10) return static_cast<uint16_t>(sign);
        mant |= 0x800000u;
        uint32_t shift = static_cast<uint32_t>(14 - exp);
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
        return static_cast<uint16_t>(sign | half);
    }
    uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
    return static_cast<uint16_t>(half);
}

float e4m3_to_f32(uint8_t v) {
    uint32_t sign = v >> 7;
    uint32_t exp = (v >> 3) & 0xfu;
    uint32_t mant = v & 0x7u;
    if (exp == 0xf && mant == 0x7) return std::nanf("");
    float mag = exp == 0 ? std::ldexp(static_cast<float>(mant), -9)  // subnormal: mant/8 * 2^-6
                         : std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, static_cast<int>(exp) - 7);
    return sign ? -mag : mag;
}

}  // namespace deepinfer
