#include "model/deepseek_v4_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deepinfer::model {
namespace {

using nlohmann::json;

template <typename T>
T get_or(const json& j, const char* key, T fallback) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    try {
        return it->get<T>();
    } catch (const json::exception&) {
        fail("config.json: '{}' has the wrong type ({})", key, it->dump());
    }
}

AttentionType attention_type_from_name(const std::string& name) {
    if (name == "sliding_attention") return AttentionType::kSliding;
    if (name == "compressed_sparse_attention") return AttentionType::kCsa;
    if (name == "heavily_compressed_attention") return AttentionType::kHca;
    fail("config.json: unknown layer type '{}'", name);
}

std::vector<AttentionType> parse_layer_types(const json& j, int n) {
    std::vector<AttentionType> types;
    if (j.contains("layer_types") && !j["layer_types"].is_null()) {
        for (const auto& t : j["layer_types"]) types.push_back(attention_type_from_name(t.get<std::string>()));
    } else if (j.contains("compress_ratios") && !j["compress_ratios"].is_null()) {
        for (const auto& r : j["compress_ratios"]) {  // legacy: 0 / 4 / 128 (+ trailing MTP entries)
            int ratio = r.get<int>();
            DI_CHECK(ratio == 0 || ratio == 4 || ratio == 128, "config.json: compress ratio {} is not 0, 4 or 128", ratio);
            types.push_back(ratio == 0 ? AttentionType::kSliding : ratio == 4 ? AttentionType::kCsa : AttentionType::kHca);
        }
    } else {  // V4-Pro default: two HCA layers, then CSA / HCA interleaved
        for (int i = 0; i < std::min(n, 2); ++i) types.push_back(AttentionType::kHca);
        for (int i = 0; i < n - 2; ++i) types.push_back(i % 2 ? AttentionType::kCsa : AttentionType::kHca);
    }
    if (static_cast<int>(types.size()) > n) types.resize(n);
    DI_CHECK(static_cast<int>(types.size()) == n, "config.json: {} layer types for {} layers", types.size(), n);
    return types;
}

std::vector<MlpType> parse_mlp_types(const json& j, int n) {
    std::vector<MlpType> types;
    if (j.contains("mlp_layer_types") && !j["mlp_layer_types"].is_null()) {
        for (const auto& t : j["mlp_layer_types"]) {
            std::string name = t.get<std::string>();
            DI_CHECK(name == "hash_moe" || name == "moe", "config.json: unknown mlp layer type '{}'", name);
            types.push_back(name == "hash_moe" ? MlpType::kHashMoe : MlpType::kMoe);
        }
    } else {
        int hash = get_or<int>(j, "num_hash_layers", 3);
        for (int i = 0; i < n; ++i) types.push_back(i < hash ? MlpType::kHashMoe : MlpType::kMoe);
    }
    if (static_cast<int>(types.size()) > n) types.resize(n);
    DI_CHECK(static_cast<int>(types.size()) == n, "config.json: {} mlp layer types for {} layers", types.size(), n);
    return types;
}

RopeConfig parse_rope(const json& r, double theta_fallback, double max_pos) {
    RopeConfig c;
    c.type = get_or<std::string>(r, "rope_type", get_or<std::string>(r, "type", "default"));
    c.theta = get_or<double>(r, "rope_theta", theta_fallback);
    if (c.type == "default") return c;
    DI_CHECK(c.type == "yarn", "config.json: rope type '{}' is not supported (default, yarn)", c.type);
    DI_CHECK(r.contains("original_max_position_embeddings"), "config.json: yarn rope needs original_max_position_embeddings");
    c.original_max_position_embeddings = r["original_max_position_embeddings"].get<double>();
    c.factor = get_or<double>(r, "factor", max_pos / c.original_max_position_embeddings);
    double beta_fast = get_or<double>(r, "beta_fast", 0.0), beta_slow = get_or<double>(r, "beta_slow", 0.0);
    c.beta_fast = beta_fast != 0.0 ? beta_fast : 32.0;  // HF: `get("beta_fast") or 32`
    c.beta_slow = beta_slow != 0.0 ? beta_slow : 1.0;
    auto mscale = [](double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
    if (r.contains("attention_factor") && !r["attention_factor"].is_null()) {
        c.attention_factor = r["attention_factor"].get<double>();
    } else {
        double m = get_or<double>(r, "mscale", 0.0), m_all = get_or<double>(r, "mscale_all_dim", 0.0);
        c.attention_factor = (m != 0.0 && m_all != 0.0) ? mscale(c.factor, m) / mscale(c.factor, m_all) : mscale(c.factor, 1.0);
    }
    return c;
}

// HF nests {"main", "compress"}; a flat dict (or legacy rope_scaling) describes the compressed
// layers' YaRN, and then V4 forces attention_factor = 1.
void parse_ropes(const json& j, DeepseekV4Config& c) {
    double rope_theta = get_or<double>(j, "rope_theta", 10000.0);
    double compress_theta = get_or<double>(j, "compress_rope_theta", 160000.0);
    double max_pos = static_cast<double>(c.max_position_embeddings);
    json rp = j.contains("rope_parameters") && !j["rope_parameters"].is_null() ? j["rope_parameters"]
              : j.contains("rope_scaling") && !j["rope_scaling"].is_null() ? j["rope_scaling"]
                                                                            : json::object();
    if (rp.contains("main") && rp["main"].is_object() && rp.contains("compress") && rp["compress"].is_object()) {
        c.rope_main = parse_rope(rp["main"], rope_theta, max_pos);
        c.rope_compress = parse_rope(rp["compress"], compress_theta, max_pos);
        return;
    }
    c.rope_main.theta = rope_theta;
    json compress = rp;
    compress["rope_theta"] = compress_theta;
    if (!compress.contains("rope_type")) compress["rope_type"] = get_or<std::string>(rp, "type", "default");
    if (compress["rope_type"] == "yarn" && !compress.contains("attention_factor")) compress["attention_factor"] = 1.0;
    c.rope_compress = parse_rope(compress, compress_theta, max_pos);
}

}  // namespace

int DeepseekV4Config::compress_rate(int layer) const {
    switch (layer_types[layer]) {
        case AttentionType::kCsa: return compress_rate_csa;
        case AttentionType::kHca: return compress_rate_hca;
        default: return 0;
    }
}

const char* attention_type_name(AttentionType t) {
    switch (t) {
        case AttentionType::kCsa: return "compressed_sparse_attention";
        case AttentionType::kHca: return "heavily_compressed_attention";
        default: return "sliding_attention";
    }
}

DeepseekV4Config parse_deepseek_v4_config(const json& j) {
    DI_CHECK(j.is_object(), "config.json is not a JSON object");
    std::string type = get_or<std::string>(j, "model_type", "");
    DI_CHECK(type == "deepseek_v4", "unsupported model_type '{}' (this build supports: deepseek_v4, deepseek_v41)", type);
    DeepseekV4Config c;
    parse_deepseek_common(j, c);
    const json rates = j.contains("compress_rates") && j["compress_rates"].is_object() ? j["compress_rates"] : json::object();
    c.compress_rate_csa = get_or<int>(j, "compress_rate_csa", get_or<int>(rates, "compressed_sparse_attention", 4));
    c.compress_rate_hca = get_or<int>(j, "compress_rate_hca", get_or<int>(rates, "heavily_compressed_attention", 128));
    c.layer_types = parse_layer_types(j, c.num_hidden_layers);
    c.mlp_layer_types = parse_mlp_types(j, c.num_hidden_layers);
    DI_CHECK(c.rope_dim <= c.index_head_dim, "config.json: rope dim {} does not fit index_head_dim {}", c.rope_dim,
             c.index_head_dim);
    DI_CHECK(c.compress_rate_csa >= 1 && c.compress_rate_hca >= 1, "config.json: compress rates must be positive");
    return c;
}

void parse_deepseek_common(const json& j, DeepseekV4Config& c) {
    c.vocab_size = get_or<int64_t>(j, "vocab_size", c.vocab_size);
    c.hidden_size = get_or<int64_t>(j, "hidden_size", c.hidden_size);
    c.num_hidden_layers = get_or<int>(j, "num_hidden_layers", c.num_hidden_layers);
    c.num_attention_heads = get_or<int>(j, "num_attention_heads", c.num_attention_heads);
    c.head_dim = get_or<int>(j, "head_dim", c.head_dim);
    c.q_lora_rank = get_or<int>(j, "q_lora_rank", c.q_lora_rank);
    c.o_groups = get_or<int>(j, "o_groups", c.o_groups);
    c.o_lora_rank = get_or<int>(j, "o_lora_rank", c.o_lora_rank);
    c.n_routed_experts = get_or<int>(j, "n_routed_experts", c.n_routed_experts);
    c.num_experts_per_tok = get_or<int>(j, "num_experts_per_tok", c.num_experts_per_tok);
    c.moe_intermediate_size = get_or<int>(j, "moe_intermediate_size", c.moe_intermediate_size);
    c.routed_scaling_factor = get_or<float>(j, "routed_scaling_factor", c.routed_scaling_factor);
    c.swiglu_limit = get_or<float>(j, "swiglu_limit", c.swiglu_limit);
    c.sliding_window = get_or<int>(j, "sliding_window", c.sliding_window);
    c.index_n_heads = get_or<int>(j, "index_n_heads", c.index_n_heads);
    c.index_head_dim = get_or<int>(j, "index_head_dim", c.index_head_dim);
    c.index_topk = get_or<int>(j, "index_topk", c.index_topk);
    c.hc_mult = get_or<int>(j, "hc_mult", c.hc_mult);
    c.hc_sinkhorn_iters = get_or<int>(j, "hc_sinkhorn_iters", c.hc_sinkhorn_iters);
    c.hc_eps = get_or<float>(j, "hc_eps", c.hc_eps);
    c.rms_norm_eps = get_or<float>(j, "rms_norm_eps", c.rms_norm_eps);
    c.max_position_embeddings = get_or<int64_t>(j, "max_position_embeddings", c.max_position_embeddings);
    c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", false);
    c.bos_token_id = get_or<int>(j, "bos_token_id", 0);
    if (j.contains("eos_token_id") && j["eos_token_id"].is_array())
        c.eos_token_ids = j["eos_token_id"].get<std::vector<int>>();
    else
        c.eos_token_ids = {get_or<int>(j, "eos_token_id", 1)};

    double prf = j.contains("partial_rotary_factor") && !j["partial_rotary_factor"].is_null()
                     ? j["partial_rotary_factor"].get<double>()
                 : j.contains("qk_rope_head_dim") ? j["qk_rope_head_dim"].get<double>() / c.head_dim
                                                  : 64.0 / 512.0;
    c.rope_dim = static_cast<int>(c.head_dim * prf);
    parse_ropes(j, c);

    if (j.contains("quantization_config") && j["quantization_config"].contains("weight_block_size")) {
        auto b = j["quantization_config"]["weight_block_size"].get<std::vector<int>>();
        DI_CHECK(b.size() == 2 && b[0] > 0 && b[1] > 0, "config.json: weight_block_size must be two positive ints");
        c.fp8_block = {b[0], b[1]};
    }

    DI_CHECK(get_or<int>(j, "num_key_value_heads", 1) == 1, "config.json: DeepSeek-V4 needs num_key_value_heads = 1");
    DI_CHECK(get_or<std::string>(j, "scoring_func", "sqrtsoftplus") == "sqrtsoftplus",
             "config.json: scoring_func '{}' is not supported (sqrtsoftplus)", get_or<std::string>(j, "scoring_func", ""));
    DI_CHECK(get_or<std::string>(j, "hidden_act", "silu") == "silu", "config.json: hidden_act must be silu");
    DI_CHECK(c.rope_dim > 0 && c.rope_dim % 2 == 0 && c.rope_dim <= c.head_dim,
             "config.json: rope dim {} does not fit head_dim {}", c.rope_dim, c.head_dim);
    DI_CHECK(c.num_attention_heads % c.o_groups == 0, "config.json: {} heads do not split into {} o_groups",
             c.num_attention_heads, c.o_groups);
    DI_CHECK(c.num_experts_per_tok <= c.n_routed_experts, "config.json: num_experts_per_tok > n_routed_experts");
    DI_CHECK(c.sliding_window >= 1 && c.hc_mult >= 1, "config.json: sliding_window and hc_mult must be positive");
}

}  // namespace deepinfer::model
