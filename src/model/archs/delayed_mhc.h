#pragma once
// Delayed (single-pass) mHC of DeepSeek-V4.1 blocks, shared by the backbone and the DSpark draft.
#include "kernels/backend.h"
#include "model/deepseek_v4_config.h"
#include "model/deepseek_v4_weights.h"

namespace deepinfer::model {

// Enters an mHC site: its coefficients (`pre` into pending_pre for the next site, post, comb)
// come from the current streams [n, hc, D], but its input x [n, D] is the streams collapsed with
// the previous site's `pre`, then RMS-normalised with `norm`.
void enter_delayed_site(kernels::Backend& backend, const DeepseekV4Config& c, const MhcWeights& site, const Tensor& norm,
                        const Tensor& streams, Tensor& pending_pre, Tensor& x, Tensor& post, Tensor& comb);

}  // namespace deepinfer::model
