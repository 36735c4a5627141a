#pragma once
// What the model is asked for at load: weight formats made from the checkpoint's
// (ModelConfig::quantize) and the arithmetic of its matrix products (ModelConfig::precision).
#include <string>

#include "kernels/backend.h"

namespace deepinfer::model {

// kQ8: the weights of linear layers as 8-bit blocks (core/quant_q8.h), MXFP4 ones kept 4-bit
// (core/quant_mxfp4.h), both multiplied by 8-bit activations; embeddings and routers keep the
// checkpoint's format.
enum class WeightQuant { kNone, kQ8 };

// "none" / "q8" (empty = none); anything else is an error naming the choices.
WeightQuant parse_weight_quant(const std::string& name);
// Fails with a clear message when the backend has no kernels for the format.
void check_weight_quant(WeightQuant quant, const kernels::Backend& backend);
// Checkpoint formats the loader keeps as stored for linear layers instead of widening them.
struct KeptFormats {
    bool mxfp4 = false;  // 4-bit experts (core/quant_mxfp4.h): the backend reads them, or q8 keeps them
    bool fp8 = false;    // e4m3 with block scales (core/quant_fp8.h): the backend reads them, and no q8
};
KeptFormats kept_formats(WeightQuant quant, const kernels::Backend& backend);

// kExact: matrix products keep fp32 activations' precision (the parity tests on random
// fixtures, which are chaotic); kFast: activations rounded to bf16 into bf16 dot products, fp32
// accumulation (trained models; judged by perplexity); kAuto: the device's default (below).
enum class Precision { kAuto, kExact, kFast };

// kAuto made concrete for a device: kFast on CUDA (its tensor cores are bf16; the bundled model's
// perplexity moves by under 0.1%), else the architecture's own choice, which kAuto keeps (the CPU
// computes in fp32). Explicit choices are returned as they are.
Precision resolve_precision(Precision p, Device device);
// "auto" / "exact" / "fast": the name parse_precision reads.
std::string precision_name(Precision p);

// "auto" / "exact" / "fast" (empty = auto); anything else is an error naming the choices.
Precision parse_precision(const std::string& name);
// The backend setting for `p`; `automatic` is the architecture's own choice.
kernels::MatmulPrecision matmul_precision(Precision p, kernels::MatmulPrecision automatic);

// The element type of the KV cache's rings and entry pools: bf16 in the fast precision where the
// backend reads it (half the memory and bandwidth), else fp32.
DType kv_cache_dtype(Precision p, const kernels::Backend& backend);

struct LoadOptions {
    WeightQuant quant = WeightQuant::kNone;
    Precision precision = Precision::kAuto;
    bool draft = false;  // also the speculative draft model the checkpoint carries (DSpark mtp.*)
};

}  // namespace deepinfer::model
