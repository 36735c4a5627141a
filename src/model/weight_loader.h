#pragma once
// Turns checkpoint tensors into the dtypes the kernels take, checking every shape.
//  - matrix(): matmul weights. bf16 / fp32 stay as stored (zero-copy); fp16 widens to fp32; FP8
//    e4m3 with block scales (`<name>_scale_inv` or `.scale`) is dequantised to bf16 when every
//    scale is a power of two (then exactly), else to fp32.
//    I8 / U8 2-D weights are MXFP4 (two e2m1 codes a byte, a power-of-two `.scale` per 32
//    inputs) and dequantised to bf16 (exactly).
//  - linear(): matrix(), then quantized as the loader was asked (WeightQuant) - for the weights of
//    linear layers; embeddings and routers stay matrix(). Formats the backend reads (KeptFormats)
//    stay as stored instead of widening: MXFP4 (DType::kMxfp4, also under kQ8) and FP8 whose
//    scales allow it (DType::kFp8, fp8::packable).
//  - param(): everything else that is float (norms, biases, mHC, sinks, E8M0 scales) as fp32.
//  - table(): integer tables (tid2eid) as stored.
// Each takes candidate names (release, HF-saved and HF-module spellings); errors name them all.
#include <array>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/weight_quant.h"

namespace deepinfer::model {

using Names = std::vector<std::string>;


// Candidate names of a per-layer tensor: "layers.L.<suffix>" and "model.layers.L.<suffix>".
Names layer_names(int layer, std::initializer_list<std::string> suffixes);
// Candidate names of a global tensor, with and without the "model." prefix.
Names global_names(std::initializer_list<std::string> names);

class WeightLoader;
// Sets the backend up for the load options (precision, 8-bit activations; `automatic` is the
// architecture's own precision) and returns the loader for them.
WeightLoader prepare_loading(const Checkpoint& ckpt, std::array<int, 2> fp8_block, const LoadOptions& options,
                             kernels::Backend& backend, kernels::MatmulPrecision automatic);

class WeightLoader {
public:
    // kept (kept_formats()): what linear() keeps as stored.
    WeightLoader(const Checkpoint& ckpt, std::array<int, 2> fp8_block, WeightQuant quant = WeightQuant::kNone,
                 KeptFormats kept = {})
        : ckpt_(ckpt), fp8_block_(fp8_block), quant_(quant), kept_(kept) {}

    bool has(const Names& names) const { return ckpt_.find(names).has_value(); }
    Tensor matrix(const Names& names, std::vector<int64_t> shape) const;
    Tensor linear(const Names& names, std::vector<int64_t> shape) const;
    Tensor param(const Names& names, std::vector<int64_t> shape) const;
    // The tensor as stored (zero-copy, shape-checked), for data read on the host as it is.
    Tensor stored(const Names& names, std::vector<int64_t> shape) const { return checked(resolve(names), shape); }
    // matrix() widened to a fresh fp32 copy the caller may modify.
    Tensor matrix_f32_copy(const Names& names, std::vector<int64_t> shape) const;
    Tensor table(const Names& names, std::vector<int64_t> shape) const;

private:
    std::string resolve(const Names& names) const;
    Tensor checked(const std::string& name, const std::vector<int64_t>& shape) const;
    Tensor dequantize_fp8(const std::string& name, const Tensor& q) const;
    // The block scales of FP8 tensor `name` (codes q) as fp32.
    Tensor fp8_scales(const std::string& name, const Tensor& q) const;
    Tensor dequantize_fp4(const std::string& name, const std::vector<int64_t>& shape) const;
    // The packed codes [rows, cols / 2] and their scales as fp32 [rows, cols / 32].
    std::pair<Tensor, Tensor> packed_fp4(const std::string& name, const std::vector<int64_t>& shape) const;

    const Checkpoint& ckpt_;
    std::array<int, 2> fp8_block_;
    WeightQuant quant_;
    KeptFormats kept_;
};

}  // namespace deepinfer::model
