#include "model/archs/moe_block.h"

namespace deepinfer::model {

void moe_feed_forward(kernels::Backend& backend, const DeepseekV4Config& c, const V4LayerWeights& lw, bool hash,
                      const Tensor& x, const Tensor& token_ids, Tensor& y) {
    int64_t n = x.dim(0), k = c.num_experts_per_tok;
    Tensor logits = backend.empty(DType::kF32, {n, static_cast<int64_t>(c.n_routed_experts)});
    backend.matmul(x, lw.gate, logits);
    Tensor ids = backend.empty(DType::kI32, {n, k}), weights = backend.empty(DType::kF32, {n, k});
    backend.moe_route(logits, hash ? nullptr : &lw.gate_bias, hash ? &lw.tid2eid : nullptr, &token_ids,
                      static_cast<int>(k), c.routed_scaling_factor, ids, weights);
    backend.moe_ffn(x, ids, weights, lw.experts, lw.shared, c.swiglu_limit, y);
}

}  // namespace deepinfer::model
