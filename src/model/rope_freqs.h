#pragma once
// RoPE inverse frequencies for DeepSeek-V4's two rope types (plain and YaRN), computed in fp32 the
// way transformers 5.17's rope initialisers do, so positions rotate by bit-identical angles.
#include <vector>

#include "kernels/backend.h"
#include "model/deepseek_v4_config.h"

namespace deepinfer::model {

// inv_freq[i] for i in [0, rope_dim / 2).
std::vector<float> rope_inv_freq(const RopeConfig& rope, int rope_dim);
// The kernels' Rope for `rope` on `backend`.
kernels::Rope make_rope(const RopeConfig& rope, int rope_dim, kernels::Backend& backend);

}  // namespace deepinfer::model
