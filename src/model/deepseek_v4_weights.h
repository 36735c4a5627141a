#pragma once
// The weights of a DeepSeek-V4 checkpoint, loaded by role. Accepts the release spelling
// (layers.N.attn.wq_a, ffn.experts.E.w1, hc_attn_fn, ...), HF's saved spelling (the same under a
// "model." prefix) and HF's module spelling (model.layers.N.self_attn.q_a_proj, stacked
// mlp.experts.gate_up_proj, ...). `mtp.*` tensors are not part of the main model and are ignored.
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "model/deepseek_v4_config.h"
#include "model/weight_loader.h"

namespace deepinfer::model {

struct MhcWeights {
    Tensor fn, base, scale;  // [(2+hc)*hc, hc*D], [(2+hc)*hc], [3]   (head: [hc, hc*D], [hc], [1])
};

struct CompressorWeights {
    Tensor wkv, wgate;  // [c*dim, D]
    Tensor ape;         // [rate, c*dim]
    Tensor norm;        // [dim]
};

struct V4LayerWeights {
    MhcWeights attn_hc, ffn_hc;
    Tensor attn_norm, ffn_norm;            // [D]
    Tensor wq_a, q_norm, wq_b;             // [q_lora, D], [q_lora], [H*d, q_lora]
    Tensor wkv, kv_norm;                   // [d, D], [d]
    Tensor wo_a, wo_b;                     // [g*o_lora, H*d/g], [D, g*o_lora]
    Tensor sinks;                          // [H]
    CompressorWeights compressor;          // CSA (c=2) / HCA (c=1)
    CompressorWeights index_compressor;    // CSA only (c=2, dim = index_head_dim)
    Tensor index_wq_b, index_weights_proj; // [Hi*di, q_lora], [Hi, D]
    Tensor gate, gate_bias, tid2eid;       // [E, D], [E] (top-k layers), [V, k] (hash layers)
    std::vector<kernels::ExpertWeights> experts;
    kernels::ExpertWeights shared;
};

struct V4Weights {
    Tensor embed, head, norm;  // [V, D], [V, D], [D]
    MhcWeights hc_head;
    std::vector<V4LayerWeights> layers;
};

// Loads and shape-checks every tensor, then places them on `backend`.
V4Weights load_deepseek_v4_weights(const DeepseekV4Config& cfg, const WeightLoader& loader,
                                   kernels::Backend& backend);

// One block stored outside the backbone under `prefix` (a draft layer: "mtp.0."), with the
// attention and MLP kinds of `cfg`'s layer `as_layer`.
V4LayerWeights load_deepseek_v4_block(const DeepseekV4Config& cfg, int as_layer, const std::string& prefix,
                                      const WeightLoader& loader, kernels::Backend& backend);

}  // namespace deepinfer::model
