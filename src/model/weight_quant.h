#pragma once
// Weight formats made at load from the checkpoint's (ModelConfig::quantize).
#include <string>

namespace deepinfer::kernels {
class Backend;
}

namespace deepinfer::model {

// kQ8: the weights of linear layers as 8-bit blocks (core/quant_q8.h), MXFP4 ones kept 4-bit
// (core/quant_mxfp4.h), both multiplied by 8-bit activations; embeddings and routers keep the
// checkpoint's format.
enum class WeightQuant { kNone, kQ8 };

// "none" / "q8" (empty = none); anything else is an error naming the choices.
WeightQuant parse_weight_quant(const std::string& name);
// Fails with a clear message when the backend has no kernels for the format.
void check_weight_quant(WeightQuant quant, const kernels::Backend& backend);

}  // namespace deepinfer::model
