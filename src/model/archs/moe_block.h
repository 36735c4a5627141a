#pragma once
// The DeepSeek MoE feed-forward shared by V4 and V4.1: sqrt-softplus router (top-k on score +
// bias, or a token-id hash table), one shared SwiGLU expert, routed SwiGLU experts.
#include "kernels/backend.h"
#include "model/deepseek_v4_config.h"
#include "model/deepseek_v4_weights.h"

namespace deepinfer::model {

// y [N, D] = shared(x) + Σ_k w_k · expert_k(x); `token_ids` feed hash routing.
void moe_feed_forward(kernels::Backend& backend, const DeepseekV4Config& c, const V4LayerWeights& lw, bool hash,
                      const Tensor& x, const Tensor& token_ids, Tensor& y);

}  // namespace deepinfer::model
