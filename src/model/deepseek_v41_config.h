#pragma once
// DeepSeek-V4.1 hyper-parameters (transformers main `deepseek_v41`): the V4 fields (kept in
// `base`, whose layers are all sliding / top-k MoE for the weights V4 and V4.1 share) plus the
// YOCO layout. config.json nests them under `text_config` (the composite multimodal config);
// a flat text config is accepted too.
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/deepseek_v4_config.h"
#include "model/engram_hash.h"

namespace deepinfer::model {

// The DSpark draft model stored beside the backbone (mtp.0 .. mtp.{num_layers - 1}): its blocks
// read the residual entering `target_layer_ids` and draft block_size - 1 tokens per forward.
struct DSparkConfig {
    int num_layers = 0;  // num_nextn_predict_layers when dspark_* keys are present; 0 = no draft
    int block_size = 5;
    int noise_token_id = 0;
    int markov_rank = 256;
    int n_routed_experts = 128;
    int num_experts_per_tok = 3;
    std::vector<int> target_layer_ids;
    bool present() const { return num_layers > 0; }
};

struct DeepseekV41Config {
    DeepseekV4Config base;
    // Per backbone layer: 0 = sliding window only, 1 = full-resolution shared KV (decoder half),
    // r > 1 = r tokens pooled per entry (encoder half).
    std::vector<int> compress_ratios;
    std::vector<int> kv_source_layer_ids;     // layers that compress; later layers reuse their entries
    std::vector<int> index_source_layer_ids;  // layers that pick entries; later layers reuse the picks
    int candidate_source_layer_id = -1;       // its top blocks restrict every later index source
    int candidate_topk_blocks = 2048;
    int candidate_block_size = 8;
    float gate_temp = 1.0f;
    EngramConfig engram;
    DSparkConfig dspark;

    // Derived per layer: the KV source whose entries it attends into (-1 = none), and roles.
    std::vector<int> kv_source_of;
    bool is_kv_source(int l) const { return kv_source_of[l] == l; }
    bool is_index_source(int l) const;
    bool uses_candidates(int l) const { return candidate_source_layer_id >= 0 && candidate_source_layer_id < l; }
    // Index of layer l among the Engram layers, -1 when it has none.
    int engram_index(int l) const;
};

// Parses config.json contents (model_type deepseek_v41, or deepseek_v41_text for a flat text
// config); throws deepinfer::Error for inconsistent layouts and for what this build does not run
// (top-1 or unnormalised routing).
DeepseekV41Config parse_deepseek_v41_config(const nlohmann::json& j);

}  // namespace deepinfer::model
