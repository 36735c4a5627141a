#pragma once
// The weights of a DeepSeek-V4.1 checkpoint: the parts V4 has too (loaded by the V4 loader from
// the V4.1 config's `base`) plus the YOCO compressor and indexer of the source layers. Release
// spelling (layers.L.attn.compressor.wkv, ...) and HF's saved spelling (model.layers.L...) load
// alike; `mtp.*` tensors belong to the draft model and are ignored here.
#include <vector>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "model/deepseek_v41_config.h"
#include "model/deepseek_v4_weights.h"
#include "model/weight_loader.h"

namespace deepinfer::model {

struct V41SourceWeights {
    Tensor comp_wkv, comp_wgate, comp_norm;  // KV sources: [d, D], [d, D] (ratio > 1), [d]
    Tensor index_wk, index_k_norm;           // KV sources: [di, d], [di] (index keys from the latent)
    Tensor index_wq_b, index_weights_proj;   // index sources: [hi * di, q_lora], [hi, D]
};

struct V41Weights {
    V4Weights core;  // gate weights already divided by gate_temp (fp32 when gate_temp != 1)
    std::vector<V41SourceWeights> sources;  // per layer; empty tensors where the layer has no role
};

V41Weights load_deepseek_v41_weights(const DeepseekV41Config& cfg, const WeightLoader& loader,
                                     kernels::Backend& backend);

}  // namespace deepinfer::model
