#pragma once
// DeepSeek-V4.1 Engram layers: weights and the table lookup. The tables stay where the
// checkpoint maps them (the release's are ~100 GB each) and the rows a step selects are
// gathered and dequantised on the host; the projection and the gate run on the backend.
#include <cstdint>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "model/deepseek_v41_config.h"
#include "model/weight_loader.h"

namespace deepinfer::model {

struct EngramLayerWeights {
    Tensor table;        // [rows, head_dim] bf16 / fp32 / fp8 e4m3, host memory (mapped)
    Tensor table_scale;  // fp8 tables: [rows, head_dim / 32] power-of-two scales (E8M0 or fp32)
    Tensor wkv;          // [(hc + 1) * D, columns * head_dim]
    Tensor weight;       // [hc, D] fp32: q_weight * k_weight (only ever used as a product)
};

EngramLayerWeights load_engram_weights(const DeepseekV41Config& cfg, int layer, const WeightLoader& w,
                                       kernels::Backend& backend);

// out [n, columns * head_dim] fp32 (host): the rows rows[i * columns + c], dequantised.
void gather_engram_rows(const EngramLayerWeights& ew, const int64_t* rows, int64_t n, int columns, Tensor& out);

}  // namespace deepinfer::model
