#include "model/weight_loader.h"

#include <cmath>
#include <cstring>
#include <fmt/ranges.h>

#include "base/error.h"
#include "core/quant_fp8.h"
#include "core/quant_mxfp4.h"
#include "core/quant_q8.h"
#include "kernels/backend.h"

namespace deepinfer::model {

Names layer_names(int layer, std::initializer_list<std::string> suffixes) {
    Names out;
    for (const char* prefix : {"layers.", "model.layers."})
        for (const auto& s : suffixes) out.push_back(fmt::format("{}{}.{}", prefix, layer, s));
    return out;
}

Names global_names(std::initializer_list<std::string> names) {
    Names out;
    for (const auto& n : names) {
        out.push_back(n);
        out.push_back("model." + n);
    }
    return out;
}
namespace {

// An unsigned power-of-two exponent (OCP E8M0): 2^(b - 127); 255 is NaN.
float e8m0_to_f32(uint8_t b) { return b == 255 ? std::nanf("") : std::ldexp(1.0f, static_cast<int>(b) - 127); }


Tensor widen_to_f32(const Tensor& t) {
    Tensor out = Tensor::empty(DType::kF32, t.shape());
    float* o = out.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
        switch (t.dtype()) {
            case DType::kF32: o[i] = t.data<float>()[i]; break;
            case DType::kBF16: o[i] = bf16_to_f32(t.data<uint16_t>()[i]); break;
            case DType::kF16: o[i] = f16_to_f32(t.data<uint16_t>()[i]); break;
            case DType::kF64: o[i] = static_cast<float>(t.data<double>()[i]); break;
            case DType::kF8E8M0: o[i] = e8m0_to_f32(t.data<uint8_t>()[i]); break;
            default: break;
        }
    }
    return out;
}

bool is_power_of_two(float s) {
    int exp;
    return s > 0 && std::frexp(s, &exp) == 0.5f;
}

}  // namespace

std::string WeightLoader::resolve(const Names& names) const {
    auto found = ckpt_.find(names);
    DI_CHECK(found.has_value(), "missing tensor in {}: looked for {}", ckpt_.dir(), fmt::join(names, ", "));
    return *found;
}

Tensor WeightLoader::checked(const std::string& name, const std::vector<int64_t>& shape) const {
    const SafetensorsEntry& e = ckpt_.entry(name);
    DI_CHECK(e.shape == shape, "tensor '{}' in {} has shape [{}], expected [{}]", name, ckpt_.file_of(name),
             fmt::join(e.shape, ", "), fmt::join(shape, ", "));
    return ckpt_.tensor(name);
}

Tensor WeightLoader::matrix(const Names& names, std::vector<int64_t> shape) const {
    std::string name = resolve(names);
    const SafetensorsEntry& e = ckpt_.entry(name);
    if ((e.dtype == DType::kI8 || e.dtype == DType::kU8) && shape.size() == 2)  // MXFP4: two e2m1 codes a byte
        return dequantize_fp4(name, shape);
    Tensor t = checked(name, shape);
    switch (t.dtype()) {
        case DType::kBF16:
        case DType::kF32: return t;
        case DType::kF16: return widen_to_f32(t);
        case DType::kF8E4M3: return dequantize_fp8(name, t);
        default:
            fail("tensor '{}' in {} has dtype {}, which is not supported for weights (bf16, fp32, fp16, fp8 e4m3, "
                 "packed fp4)", name,
                 ckpt_.file_of(name), dtype_name(t.dtype()));
    }
}

Tensor WeightLoader::linear(const Names& names, std::vector<int64_t> shape) const {
    std::string name = resolve(names);
    const SafetensorsEntry& e = ckpt_.entry(name);
    if (kept_.mxfp4 && (e.dtype == DType::kI8 || e.dtype == DType::kU8) && shape.size() == 2) {  // 4 bits as stored
        auto [codes, scale] = packed_fp4(name, shape);
        if (mxfp4::packable(scale)) return mxfp4::pack(codes, scale, shape[1]);
    }
    if (kept_.fp8 && e.dtype == DType::kF8E4M3 && shape.size() == 2) {  // 8 bits as stored where exact
        Tensor q = checked(name, shape), scale = fp8_scales(name, q);
        if (fp8::packable(q, scale, fp8_block_)) return fp8::pack(q, scale, fp8_block_);
    }
    if (quant_ != WeightQuant::kQ8) return matrix(names, std::move(shape));
    return q8::quantize(matrix(names, std::move(shape)));
}

WeightQuant parse_weight_quant(const std::string& name) {
    if (name.empty() || name == "none") return WeightQuant::kNone;
    if (name == "q8") return WeightQuant::kQ8;
    fail("unknown weight quantization '{}' (none, q8)", name);
}

void check_weight_quant(WeightQuant quant, const kernels::Backend& backend) {
    DI_CHECK(quant == WeightQuant::kNone || backend.device() == Device::kCpu,
             "q8 weights are implemented for the CPU backend only, not {}", backend.name());
}

KeptFormats kept_formats(WeightQuant quant, const kernels::Backend& backend) {
    return {.mxfp4 = quant == WeightQuant::kQ8 || backend.reads_mxfp4(),
            .fp8 = quant != WeightQuant::kQ8 && backend.reads_fp8()};
}

WeightLoader prepare_loading(const Checkpoint& ckpt, std::array<int, 2> fp8_block, const LoadOptions& options,
                             kernels::Backend& backend, kernels::MatmulPrecision automatic) {
    check_weight_quant(options.quant, backend);
    backend.execution().set_matmul_precision(matmul_precision(resolve_precision(options.precision, backend.device()), automatic));
    backend.execution().set_int8_activations(options.quant == WeightQuant::kQ8);
    return WeightLoader(ckpt, fp8_block, options.quant, kept_formats(options.quant, backend));
}

Precision parse_precision(const std::string& name) {
    if (name.empty() || name == "auto") return Precision::kAuto;
    if (name == "exact") return Precision::kExact;
    if (name == "fast") return Precision::kFast;
    fail("unknown precision '{}' (auto, exact, fast)", name);
}

Precision resolve_precision(Precision p, Device device) {
    return p == Precision::kAuto && device == Device::kCuda ? Precision::kFast : p;
}

std::string precision_name(Precision p) {
    switch (p) {
        case Precision::kExact: return "exact";
        case Precision::kFast: return "fast";
        default: return "auto";
    }
}

DType kv_cache_dtype(Precision p, const kernels::Backend& backend) {
    bool fast = resolve_precision(p, backend.device()) == Precision::kFast;
    return fast && backend.reads_bf16_cache() ? DType::kBF16 : DType::kF32;
}

kernels::MatmulPrecision matmul_precision(Precision p, kernels::MatmulPrecision automatic) {
    switch (p) {
        case Precision::kExact: return kernels::MatmulPrecision::kFp32;
        case Precision::kFast: return kernels::MatmulPrecision::kBf16;
        default: return automatic;
    }
}

Tensor WeightLoader::matrix_f32_copy(const Names& names, std::vector<int64_t> shape) const {
    Tensor m = matrix(names, std::move(shape));
    if (m.dtype() != DType::kF32) return widen_to_f32(m);
    Tensor copy = Tensor::empty(DType::kF32, m.shape());
    std::memcpy(copy.raw(), m.raw(), m.nbytes());
    return copy;
}

Tensor WeightLoader::param(const Names& names, std::vector<int64_t> shape) const {
    std::string name = resolve(names);
    Tensor t = checked(name, shape);
    DI_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16 ||
                 t.dtype() == DType::kF64 || t.dtype() == DType::kF8E8M0,
             "tensor '{}' in {} has dtype {}, expected a float type", name, ckpt_.file_of(name), dtype_name(t.dtype()));
    return t.dtype() == DType::kF32 ? t : widen_to_f32(t);
}

Tensor WeightLoader::table(const Names& names, std::vector<int64_t> shape) const {
    std::string name = resolve(names);
    Tensor t = checked(name, shape);
    DI_CHECK(t.dtype() == DType::kI64 || t.dtype() == DType::kI32, "tensor '{}' in {} has dtype {}, expected I64 or I32",
             name, ckpt_.file_of(name), dtype_name(t.dtype()));
    return t;
}

Tensor WeightLoader::fp8_scales(const std::string& name, const Tensor& q) const {
    DI_CHECK(q.ndim() == 2, "FP8 tensor '{}' must be 2-D", name);
    std::string base = name.size() > 7 && name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
    auto scale_name = ckpt_.find({name + "_scale_inv", base + ".weight_scale_inv", base + ".scale"});
    DI_CHECK(scale_name.has_value(), "FP8 tensor '{}' in {} has no block scale ({}_scale_inv or {}.scale)", name,
             ckpt_.file_of(name), name, base);
    int64_t br = fp8_block_[0], bc = fp8_block_[1];
    return param({*scale_name}, {(q.dim(0) + br - 1) / br, (q.dim(1) + bc - 1) / bc});
}

Tensor WeightLoader::dequantize_fp8(const std::string& name, const Tensor& q) const {
    int64_t rows = q.dim(0), cols = q.dim(1), br = fp8_block_[0], bc = fp8_block_[1];
    Tensor scale = fp8_scales(name, q);
    const float* s = scale.data<float>();
    bool exact_in_bf16 = true;
    for (int64_t i = 0; i < scale.numel(); ++i) exact_in_bf16 = exact_in_bf16 && is_power_of_two(s[i]);
    Tensor out = Tensor::empty(exact_in_bf16 ? DType::kBF16 : DType::kF32, {rows, cols});
    const uint8_t* src = q.data<uint8_t>();
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            float v = e4m3_to_f32(src[r * cols + c]) * s[(r / br) * scale.dim(1) + c / bc];
            if (exact_in_bf16)
                out.data<uint16_t>()[r * cols + c] = f32_to_bf16(v);
            else
                out.data<float>()[r * cols + c] = v;
        }
    return out;
}

// Routed experts of the releases: e2m1 codes packed two per byte along the input dimension
// (the lower nibble holds the even column), one power-of-two scale per 32 inputs. Every value
// is exact in bf16.
std::pair<Tensor, Tensor> WeightLoader::packed_fp4(const std::string& name, const std::vector<int64_t>& shape) const {
    int64_t rows = shape[0], cols = shape[1];
    DI_CHECK(cols % 32 == 0, "packed FP4 tensor '{}': {} columns are not a multiple of the 32-column scale block", name,
             cols);
    Tensor q = checked(name, {rows, cols / 2});
    std::string base = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
    auto scale_name = ckpt_.find({base + ".scale", name + "_scale", base + ".weight_scale"});
    DI_CHECK(scale_name.has_value(), "packed FP4 tensor '{}' in {} has no scale ({}.scale)", name, ckpt_.file_of(name), base);
    return {q, param({*scale_name}, {rows, cols / 32})};
}

Tensor WeightLoader::dequantize_fp4(const std::string& name, const std::vector<int64_t>& shape) const {
    int64_t rows = shape[0], cols = shape[1];
    auto [q, scale] = packed_fp4(name, shape);
    Tensor out = Tensor::empty(DType::kBF16, {rows, cols});
    const uint8_t* src = q.data<uint8_t>();
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            uint8_t byte = src[r * (cols / 2) + c / 2];
            float v = mxfp4::kE2m1[c % 2 == 0 ? byte & 0xF : byte >> 4] * scale.data<float>()[r * (cols / 32) + c / 32];
            out.data<uint16_t>()[r * cols + c] = f32_to_bf16(v);
        }
    return out;
}

}  // namespace deepinfer::model
