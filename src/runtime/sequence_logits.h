#pragma once
// Logits of every position of one token sequence, computed through the cache in a chosen
// schedule: one prefill, fixed-size chunks, or a prefill followed by one-token decode steps.
// All schedules must give the same logits (the model's full-forward semantics); the `logits` CLI
// and the parity tests use this to check exactly that.
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/causal_lm.h"

namespace deepinfer::runtime {

struct LogitsSchedule {
    int64_t chunk = 0;        // > 0: prefill in chunks of this many tokens
    int64_t decode_from = -1; // >= 0: prefill this many tokens, then decode one at a time
};

// Returns host fp32 logits [ids.size(), vocab].
Tensor sequence_logits(model::CausalLm& model, const std::vector<int32_t>& ids, const LogitsSchedule& schedule);

}  // namespace deepinfer::runtime
