#pragma once
// Element types of tensors on disk and in memory, and scalar conversions between them.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace deepinfer {

// kQ8, kMxfp4 and kFp8 are not safetensors types: weights kept in rows of 8-bit blocks made at
// load (core/quant_q8.h), of the releases' 4-bit blocks (core/quant_mxfp4.h) or of their e4m3
// codes with block scales (core/quant_fp8.h); their rows are not element-sized, so size tensors
// of them with dtype_row_bytes().
enum class DType : uint8_t {
    kF32, kF16, kBF16, kF8E4M3, kF64, kI64, kI32, kI16, kI8, kU8, kBool, kF8E8M0, kQ8, kMxfp4, kFp8, kUnknown
};

// Weights stored in rows of blocks with their scales (kQ8, kMxfp4, kFp8).
inline bool is_block_quantized(DType t) { return t == DType::kQ8 || t == DType::kMxfp4 || t == DType::kFp8; }

// Bytes per element (0 for kUnknown and for the block-quantized types, whose rows are blocks).
size_t dtype_size(DType dtype);
// Bytes of one row of `row_elems` elements (the last dimension).
size_t dtype_row_bytes(DType dtype, int64_t row_elems);
// Safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
const char* dtype_name(DType dtype);
// Parses the safetensors spelling; unknown spellings give kUnknown.
DType parse_dtype(std::string_view name);

inline float bf16_to_f32(uint16_t v) {
    uint32_t bits = static_cast<uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// Round to nearest even, NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t v);
uint16_t f32_to_f16(float f);
// OCP FP8 E4M3 ("fn" variant: no infinities, 0x7f/0xff are NaN).
float e4m3_to_f32(uint8_t v);

}  // namespace deepinfer
