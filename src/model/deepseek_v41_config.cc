#include "model/deepseek_v41_config.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deepinfer::model {
namespace {

using nlohmann::json;

std::vector<int> int_list(const json& j, const char* key, std::vector<int> fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    DI_CHECK(j[key].is_array(), "config.json: '{}' must be a list of layer ids", key);
    return j[key].get<std::vector<int>>();
}

template <typename T>
T value_or(const json& j, const char* key, T fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    try {
        return j[key].get<T>();
    } catch (const json::exception&) {
        fail("config.json: '{}' has the wrong type ({})", key, j[key].dump());
    }
}

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Released DeepSeek-V4.1-Flash layout for the given depth: [0, 0] + [2] * 18 + [1] * 20.
std::vector<int> default_ratios(int n) {
    std::vector<int> r(n, 1);
    for (int l = 0; l < n && l < 20; ++l) r[l] = l < 2 ? 0 : 2;
    return r;
}

void check_layout(DeepseekV41Config& c) {
    int n = c.base.num_hidden_layers;
    DI_CHECK(static_cast<int>(c.compress_ratios.size()) >= n, "config.json: {} compress_ratios for {} layers",
             c.compress_ratios.size(), n);
    c.compress_ratios.resize(n);  // trailing entries belong to the draft (DSpark) layers
    for (int id : c.kv_source_layer_ids)
        DI_CHECK(id >= 0 && id < n && c.compress_ratios[id] > 0, "config.json: KV source layer {} has no compressed branch", id);
    for (int id : c.index_source_layer_ids)
        DI_CHECK(id >= 0 && id < n && c.compress_ratios[id] > 0, "config.json: index source layer {} has no compressed branch", id);
    c.kv_source_of.assign(n, -1);
    int source = -1;
    for (int l = 0; l < n; ++l) {
        if (contains(c.kv_source_layer_ids, l)) source = l;
        if (c.compress_ratios[l] == 0) continue;
        DI_CHECK(source >= 0, "config.json: layer {} has a compressed branch but no KV source at or before it", l);
        DI_CHECK(c.compress_ratios[l] == c.compress_ratios[source],
                 "config.json: layer {} (ratio {}) reuses KV source {} of ratio {}", l, c.compress_ratios[l], source,
                 c.compress_ratios[source]);
        c.kv_source_of[l] = source;
    }
    for (int id : c.kv_source_layer_ids)  // its index keys come from its own indexer
        DI_CHECK(contains(c.index_source_layer_ids, id), "config.json: KV source layer {} is not an index source", id);
    if (c.candidate_source_layer_id >= 0) {
        int cand = c.candidate_source_layer_id;
        DI_CHECK(cand < n && contains(c.index_source_layer_ids, cand),
                 "config.json: candidate source layer {} is not an index source", cand);
        for (int id : c.index_source_layer_ids)  // candidate blocks index the candidate source's entries
            DI_CHECK(id <= cand || c.kv_source_of[id] == c.kv_source_of[cand],
                     "config.json: index source {} reads KV source {}, not the candidate source's ({})", id,
                     c.kv_source_of[id], c.kv_source_of[cand]);
    }
    DI_CHECK(c.candidate_topk_blocks > 0 && c.candidate_block_size > 0, "config.json: candidate blocks must be positive");
}

void parse_engram(const json& j, DeepseekV41Config& c) {
    EngramConfig& e = c.engram;
    e.layer_ids = int_list(j, "engram_layer_ids", {});
    if (e.layer_ids.empty()) return;
    e.max_ngram_size = value_or<int>(j, "engram_max_ngram_size", 4);
    e.n_heads = value_or<int>(j, "engram_n_heads", 8);
    e.head_dim = value_or<int>(j, "engram_head_dim", 256);
    e.vocab_size = value_or<int64_t>(j, "engram_vocab_size", 0);
    e.compressed_vocab_size = value_or<int64_t>(j, "engram_compressed_vocab_size", 0);
    e.pad_id = value_or<int>(j, "engram_pad_id", 2);
    if (j.contains("engram_num_embeddings") && j["engram_num_embeddings"].is_array())
        e.num_embeddings = j["engram_num_embeddings"].get<std::vector<int64_t>>();
    for (int l : e.layer_ids)
        DI_CHECK(l >= 0 && l < c.base.num_hidden_layers, "config.json: Engram layer {} is not a layer", l);
    DI_CHECK(e.num_embeddings.size() == e.layer_ids.size(),
             "config.json: engram_num_embeddings has {} entries for {} Engram layers", e.num_embeddings.size(),
             e.layer_ids.size());
    DI_CHECK(e.max_ngram_size >= 2 && e.n_heads >= 1 && e.head_dim >= 1 && e.vocab_size >= 2 &&
                 e.compressed_vocab_size >= 1,
             "config.json: Engram sizes (max n-gram, heads, head dim, vocab, compressed vocab) must be positive");
}

}  // namespace

int DeepseekV41Config::engram_index(int l) const {
    auto it = std::find(engram.layer_ids.begin(), engram.layer_ids.end(), l);
    return it == engram.layer_ids.end() ? -1 : static_cast<int>(it - engram.layer_ids.begin());
}

bool DeepseekV41Config::is_index_source(int l) const { return contains(index_source_layer_ids, l); }

namespace {

void parse_dspark(const json& j, DeepseekV41Config& c) {
    if (!j.contains("dspark_target_layer_ids")) return;
    DSparkConfig& d = c.dspark;
    d.target_layer_ids = int_list(j, "dspark_target_layer_ids", {});
    d.num_layers = value_or<int>(j, "num_nextn_predict_layers", 0);
    d.block_size = value_or<int>(j, "dspark_block_size", d.block_size);
    d.noise_token_id = value_or<int>(j, "dspark_noise_token_id", d.noise_token_id);
    d.markov_rank = value_or<int>(j, "dspark_markov_rank", d.markov_rank);
    d.n_routed_experts = value_or<int>(j, "dspark_n_routed_experts", d.n_routed_experts);
    d.num_experts_per_tok = value_or<int>(j, "dspark_num_experts_per_tok", d.num_experts_per_tok);
    DI_CHECK(d.num_layers >= 1, "config.json: dspark_* keys need num_nextn_predict_layers >= 1 draft layers");
    DI_CHECK(!d.target_layer_ids.empty(), "config.json: dspark_target_layer_ids is empty");
    for (size_t i = 0; i < d.target_layer_ids.size(); ++i) {
        int l = d.target_layer_ids[i];
        DI_CHECK(l >= 0 && l < c.base.num_hidden_layers, "config.json: DSpark target layer {} is not a layer", l);
        DI_CHECK(std::count(d.target_layer_ids.begin(), d.target_layer_ids.begin() + i, l) == 0,
                 "config.json: DSpark target layer {} is listed twice", l);
    }
    DI_CHECK(d.block_size >= 2, "config.json: dspark_block_size must be at least 2 (an anchor and a draft)");
    DI_CHECK(d.noise_token_id >= 0 && d.noise_token_id < c.base.vocab_size,
             "config.json: dspark_noise_token_id {} is not a token", d.noise_token_id);
    DI_CHECK(d.markov_rank >= 1, "config.json: dspark_markov_rank must be positive");
    DI_CHECK(d.num_experts_per_tok > 1 && d.num_experts_per_tok <= d.n_routed_experts,
             "config.json: DSpark routes to {} of {} experts (more than one, at most all)", d.num_experts_per_tok,
             d.n_routed_experts);
}

}  // namespace

DeepseekV41Config parse_deepseek_v41_config(const json& top) {
    DI_CHECK(top.is_object(), "config.json is not a JSON object");
    std::string type = value_or<std::string>(top, "model_type", "");
    DI_CHECK(type == "deepseek_v41" || type == "deepseek_v41_text",
             "unsupported model_type '{}' (this build supports: deepseek_v4, deepseek_v41)", type);
    json j = top.contains("text_config") && top["text_config"].is_object() ? top["text_config"] : top;
    if (!j.contains("quantization_config") && top.contains("quantization_config"))
        j["quantization_config"] = top["quantization_config"];
    DeepseekV41Config c;
    c.base.num_hidden_layers = 40;
    c.base.hidden_size = 5120;
    c.base.q_lora_rank = 1280;
    c.base.n_routed_experts = 384;
    c.base.moe_intermediate_size = 2304;
    c.base.index_n_heads = 32;
    c.base.rms_norm_eps = 1e-20f;
    parse_deepseek_common(j, c.base);
    int n = c.base.num_hidden_layers;
    c.base.layer_types.assign(n, AttentionType::kSliding);  // the compressed branch is V4.1's own
    c.base.mlp_layer_types.assign(n, MlpType::kMoe);        // no hash routing in V4.1
    c.base.has_hc_head = false;
    if (c.base.swiglu_limit <= 0.0f) c.base.swiglu_limit = std::numeric_limits<float>::infinity();  // 0 = no clamp

    c.compress_ratios = int_list(j, "compress_ratios", default_ratios(n));
    c.kv_source_layer_ids = int_list(j, "kv_source_layer_ids", {2, 8, 14, 20});
    c.index_source_layer_ids = int_list(j, "index_source_layer_ids", {2, 8, 14, 20, 24, 28, 32, 36});
    int last_source = c.kv_source_layer_ids.empty() ? -1 : c.kv_source_layer_ids.back();
    c.candidate_source_layer_id = value_or<int>(j, "candidate_source_layer_id", last_source);
    c.candidate_topk_blocks = value_or<int>(j, "candidate_topk_blocks", c.candidate_topk_blocks);
    c.candidate_block_size = value_or<int>(j, "candidate_block_size", c.candidate_block_size);
    c.gate_temp = value_or<float>(j, "gate_temp", 1.0f);
    check_layout(c);
    parse_engram(j, c);
    parse_dspark(j, c);

    DI_CHECK(c.base.num_experts_per_tok > 1 && value_or<bool>(j, "norm_topk_prob", true),
             "config.json: only normalised top-k routing with more than one expert is supported");
    DI_CHECK(c.gate_temp > 0.0f, "config.json: gate_temp must be positive");
    DI_CHECK(c.base.rope_dim <= c.base.index_head_dim, "config.json: rope dim {} does not fit index_head_dim {}",
             c.base.rope_dim, c.base.index_head_dim);
    return c;
}

}  // namespace deepinfer::model
