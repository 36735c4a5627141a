#pragma once
// DeepSeek-V4 hyper-parameters, parsed from an HF config.json exactly as transformers 5.17's
// DeepseekV4Config reads it, including the legacy keys of release checkpoints (compress_ratios,
// num_hash_layers, qk_rope_head_dim, rope_scaling). Missing keys take V4-Flash defaults.
#include <array>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace deepinfer::model {

enum class AttentionType { kSliding, kCsa, kHca };
enum class MlpType { kHashMoe, kMoe };

struct RopeConfig {
    std::string type = "default";  // "default" or "yarn"
    double theta = 10000.0;
    double factor = 1.0;  // yarn
    double original_max_position_embeddings = 0;
    double beta_fast = 32.0, beta_slow = 1.0;
    double attention_factor = 1.0;  // multiplies cos and sin
};

struct DeepseekV4Config {
    int64_t vocab_size = 129280;
    int64_t hidden_size = 4096;
    int num_hidden_layers = 43;
    int num_attention_heads = 64;
    int head_dim = 512;
    int rope_dim = 64;  // head_dim * partial_rotary_factor
    int q_lora_rank = 1024;
    int o_groups = 8;
    int o_lora_rank = 1024;
    int n_routed_experts = 256;
    int num_experts_per_tok = 6;
    int moe_intermediate_size = 2048;
    float routed_scaling_factor = 1.5f;
    float swiglu_limit = 10.0f;
    std::vector<AttentionType> layer_types;
    std::vector<MlpType> mlp_layer_types;
    int compress_rate_csa = 4;
    int compress_rate_hca = 128;
    int sliding_window = 128;
    int index_n_heads = 64;
    int index_head_dim = 128;
    int index_topk = 512;
    int hc_mult = 4;
    int hc_sinkhorn_iters = 20;
    float hc_eps = 1e-6f;
    float rms_norm_eps = 1e-6f;
    int64_t max_position_embeddings = 1048576;
    RopeConfig rope_main;      // sliding-only layers
    RopeConfig rope_compress;  // CSA / HCA layers, their compressors and the indexer
    bool tie_word_embeddings = false;
    int bos_token_id = 0;
    std::vector<int> eos_token_ids = {1};
    std::array<int, 2> fp8_block = {128, 128};  // quantization_config.weight_block_size
    bool has_hc_head = true;  // V4: a learned mHC collapse before the final norm (V4.1 has none)

    int compress_rate(int layer) const;
};

// Parses config.json contents; throws deepinfer::Error for an unknown model_type, unsupported
// settings (another scoring function, several KV heads, ...) or inconsistent layer lists.
DeepseekV4Config parse_deepseek_v4_config(const nlohmann::json& j);
// The fields V4 and V4.1 share (dimensions, MoE, mHC, RoPE, eos, FP8 blocks) and their checks.
void parse_deepseek_common(const nlohmann::json& j, DeepseekV4Config& c);

const char* attention_type_name(AttentionType t);

}  // namespace deepinfer::model
