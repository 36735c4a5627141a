#include "model/deepseek_v41_weights.h"

namespace deepinfer::model {
namespace {

V41SourceWeights source_weights(const DeepseekV41Config& cfg, int l, const WeightLoader& w, kernels::Backend& backend) {
    const DeepseekV4Config& c = cfg.base;
    int64_t D = c.hidden_size, d = c.head_dim, di = c.index_head_dim, hi = c.index_n_heads;
    auto matrix = [&](std::initializer_list<std::string> n, std::vector<int64_t> s) {
        return backend.upload(w.linear(layer_names(l, n), std::move(s)));
    };
    auto param = [&](std::initializer_list<std::string> n, std::vector<int64_t> s) {
        return backend.upload(w.param(layer_names(l, n), std::move(s)));
    };
    V41SourceWeights out;
    if (cfg.is_kv_source(l)) {
        out.comp_wkv = matrix({"attn.compressor.wkv.weight"}, {d, D});
        if (cfg.compress_ratios[l] > 1) out.comp_wgate = matrix({"attn.compressor.wgate.weight"}, {d, D});
        out.comp_norm = param({"attn.compressor.norm.weight"}, {d});
        out.index_wk = matrix({"attn.indexer.wk.weight"}, {di, d});
        out.index_k_norm = param({"attn.indexer.k_norm.weight"}, {di});
    }
    if (cfg.is_index_source(l)) {
        out.index_wq_b = matrix({"attn.indexer.wq_b.weight"}, {hi * di, c.q_lora_rank});
        out.index_weights_proj = matrix({"attn.indexer.weights_proj.weight"}, {hi, D});
    }
    return out;
}

}  // namespace

V41Weights load_deepseek_v41_weights(const DeepseekV41Config& cfg, const WeightLoader& w, kernels::Backend& backend) {
    V41Weights out;
    out.core = load_deepseek_v4_weights(cfg.base, w, backend);
    const DeepseekV4Config& c = cfg.base;
    for (int l = 0; l < c.num_hidden_layers; ++l) {
        out.sources.push_back(source_weights(cfg, l, w, backend));
        if (cfg.gate_temp == 1.0f) continue;
        // logits / gate_temp, folded into the router weight once.
        Tensor gate = w.matrix_f32_copy(layer_names(l, {"ffn.gate.weight"}), {c.n_routed_experts, c.hidden_size});
        for (int64_t i = 0; i < gate.numel(); ++i) gate.data<float>()[i] /= cfg.gate_temp;
        out.core.layers[l].gate = backend.upload(gate);
    }
    return out;
}

}  // namespace deepinfer::model
