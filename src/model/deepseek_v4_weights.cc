#include "model/deepseek_v4_weights.h"

#include <fmt/format.h>

#include "base/error.h"

namespace deepinfer::model {
namespace {

struct Loader {
    const DeepseekV4Config& c;
    const WeightLoader& w;
    kernels::Backend& backend;
    std::string prefix = {};  // set: the block's tensors are "<prefix><suffix>" (a draft layer)

    Names names(int l, std::initializer_list<std::string> suffixes) const {
        if (prefix.empty()) return layer_names(l, suffixes);
        Names out;
        for (const auto& s : suffixes) out.push_back(prefix + s);
        return out;
    }

    Tensor matrix(const Names& n, std::vector<int64_t> shape) { return backend.upload(w.linear(n, std::move(shape))); }
    // Embeddings and routers keep the checkpoint's format (they are looked up or pick experts).
    Tensor unquantized(const Names& n, std::vector<int64_t> shape) { return backend.upload(w.matrix(n, std::move(shape))); }
    Tensor param(const Names& n, std::vector<int64_t> shape) { return backend.upload(w.param(n, std::move(shape))); }

    MhcWeights mhc(int l, const char* site) {  // site: "attn" / "ffn"
        int64_t mix = (2 + c.hc_mult) * c.hc_mult, width = c.hc_mult * c.hidden_size;
        std::string s = site;
        return {param(names(l, {"hc_" + s + "_fn", s + "_hc.fn"}), {mix, width}),
                param(names(l, {"hc_" + s + "_base", s + "_hc.base"}), {mix}),
                param(names(l, {"hc_" + s + "_scale", s + "_hc.scale"}), {3})};
    }

    // official: attn.compressor.* / attn.indexer.compressor.*; HF: self_attn.compressor[.indexer].*
    CompressorWeights compressor(int l, const std::string& official, const std::string& hf, int64_t c_times_dim,
                                 int64_t dim, int rate) {
        return {matrix(names(l, {official + ".wkv.weight", hf + ".kv_proj.weight"}), {c_times_dim, c.hidden_size}),
                matrix(names(l, {official + ".wgate.weight", hf + ".gate_proj.weight"}), {c_times_dim, c.hidden_size}),
                param(names(l, {official + ".ape", hf + ".position_bias"}), {rate, c_times_dim}),
                param(names(l, {official + ".norm.weight", official + ".kv_norm.weight", hf + ".kv_norm.weight"}), {dim})};
    }

    void attention(int l, V4LayerWeights& lw) {
        int64_t D = c.hidden_size, d = c.head_dim, H = c.num_attention_heads, g = c.o_groups;
        lw.attn_norm = param(names(l, {"attn_norm.weight", "input_layernorm.weight"}), {D});
        lw.wq_a = matrix(names(l, {"attn.wq_a.weight", "self_attn.q_a_proj.weight"}), {c.q_lora_rank, D});
        lw.q_norm = param(names(l, {"attn.q_norm.weight", "self_attn.q_a_norm.weight"}), {c.q_lora_rank});
        lw.wq_b = matrix(names(l, {"attn.wq_b.weight", "self_attn.q_b_proj.weight"}), {H * d, c.q_lora_rank});
        lw.wkv = matrix(names(l, {"attn.wkv.weight", "self_attn.kv_proj.weight"}), {d, D});
        lw.kv_norm = param(names(l, {"attn.kv_norm.weight", "attn.norm.weight", "self_attn.kv_norm.weight"}), {d});
        lw.wo_a = matrix(names(l, {"attn.wo_a.weight", "self_attn.o_a_proj.weight"}), {g * c.o_lora_rank, H * d / g});
        lw.wo_b = matrix(names(l, {"attn.wo_b.weight", "self_attn.o_b_proj.weight"}), {D, g * c.o_lora_rank});
        lw.sinks = param(names(l, {"attn.attn_sink", "self_attn.sinks"}), {H});
        AttentionType type = c.layer_types[l];
        if (type == AttentionType::kSliding) return;
        int64_t cmul = type == AttentionType::kCsa ? 2 : 1;
        lw.compressor = compressor(l, "attn.compressor", "self_attn.compressor", cmul * d, d, c.compress_rate(l));
        if (type != AttentionType::kCsa) return;
        int64_t di = c.index_head_dim, hi = c.index_n_heads;
        lw.index_compressor =
            compressor(l, "attn.indexer.compressor", "self_attn.compressor.indexer", 2 * di, di, c.compress_rate_csa);
        lw.index_wq_b = matrix(names(l, {"attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"}),
                               {hi * di, c.q_lora_rank});
        lw.index_weights_proj = matrix(
            names(l, {"attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight"}),
            {hi, D});
    }

    void experts(int l, V4LayerWeights& lw) {
        int64_t E = c.n_routed_experts, I = c.moe_intermediate_size, D = c.hidden_size;
        Names stacked_gate_up = names(l, {"mlp.experts.gate_up_proj", "ffn.experts.gate_up_proj"});
        if (w.has(stacked_gate_up)) {  // HF module layout: [E, 2I, D] and [E, D, I]
            Tensor gu = matrix(stacked_gate_up, {E, 2 * I, D}).reshape({E * 2 * I, D});
            Tensor down = matrix(names(l, {"mlp.experts.down_proj", "ffn.experts.down_proj"}), {E, D, I}).reshape({E * D, I});
            for (int64_t e = 0; e < E; ++e)
                lw.experts.push_back({gu.rows(e * 2 * I, e * 2 * I + I), gu.rows(e * 2 * I + I, (e + 1) * 2 * I),
                                      down.rows(e * D, (e + 1) * D)});
            return;
        }
        for (int64_t e = 0; e < E; ++e) {
            std::string p = fmt::format("ffn.experts.{}.", e), q = fmt::format("mlp.experts.{}.", e);
            lw.experts.push_back({matrix(names(l, {p + "w1.weight", q + "gate_proj.weight"}), {I, D}),
                                  matrix(names(l, {p + "w3.weight", q + "up_proj.weight"}), {I, D}),
                                  matrix(names(l, {p + "w2.weight", q + "down_proj.weight"}), {D, I})});
        }
    }

    void ffn(int l, V4LayerWeights& lw) {
        int64_t D = c.hidden_size, I = c.moe_intermediate_size, E = c.n_routed_experts;
        lw.ffn_norm = param(names(l, {"ffn_norm.weight", "post_attention_layernorm.weight"}), {D});
        lw.gate = unquantized(names(l, {"ffn.gate.weight", "mlp.gate.weight"}), {E, D});
        if (c.mlp_layer_types[l] == MlpType::kHashMoe) {
            Tensor table = w.table(names(l, {"ffn.gate.tid2eid", "mlp.gate.tid2eid"}), {c.vocab_size, c.num_experts_per_tok});
            for (int64_t i = 0; i < table.numel(); ++i) {  // device kernels index experts with these
                int64_t id = table.dtype() == DType::kI64 ? table.data<int64_t>()[i] : table.data<int32_t>()[i];
                DI_CHECK(id >= 0 && id < E, "layer {}: tid2eid holds expert {} (of {})", l, id, E);
            }
            lw.tid2eid = backend.upload(table);
        }
        else
            lw.gate_bias = param(names(l, {"ffn.gate.bias", "mlp.gate.e_score_correction_bias"}), {E});
        experts(l, lw);
        lw.shared = {matrix(names(l, {"ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"}), {I, D}),
                     matrix(names(l, {"ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"}), {I, D}),
                     matrix(names(l, {"ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"}), {D, I})};
    }
};

V4LayerWeights load_block(Loader& ld, int l) {
    V4LayerWeights lw;
    lw.attn_hc = ld.mhc(l, "attn");
    lw.ffn_hc = ld.mhc(l, "ffn");
    ld.attention(l, lw);
    ld.ffn(l, lw);
    return lw;
}

}  // namespace

V4Weights load_deepseek_v4_weights(const DeepseekV4Config& c, const WeightLoader& w, kernels::Backend& backend) {
    Loader ld{c, w, backend};
    V4Weights out;
    int64_t V = c.vocab_size, D = c.hidden_size, hc = c.hc_mult;
    out.embed = ld.unquantized(global_names({"embed.weight", "embed_tokens.weight"}), {V, D});
    out.head = c.tie_word_embeddings ? out.embed : ld.matrix(global_names({"head.weight", "lm_head.weight"}), {V, D});
    out.norm = ld.param(global_names({"norm.weight"}), {D});
    if (c.has_hc_head)
        out.hc_head = {ld.param(global_names({"hc_head_fn", "hc_head.hc_fn"}), {hc, hc * D}),
                       ld.param(global_names({"hc_head_base", "hc_head.hc_base"}), {hc}),
                       ld.param(global_names({"hc_head_scale", "hc_head.hc_scale"}), {1})};
    for (int l = 0; l < c.num_hidden_layers; ++l) out.layers.push_back(load_block(ld, l));
    return out;
}

V4LayerWeights load_deepseek_v4_block(const DeepseekV4Config& c, int as_layer, const std::string& prefix,
                                      const WeightLoader& w, kernels::Backend& backend) {
    Loader ld{c, w, backend, prefix};
    return load_block(ld, as_layer);
}

}  // namespace deepinfer::model
