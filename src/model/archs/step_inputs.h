#pragma once
// Host-side preparation of a forward step shared by the architectures: token ids (range-checked
// here, since device kernels cannot throw), absolute positions and the rows whose logits return.
#include <cstdint>

#include "kernels/backend.h"
#include "model/causal_lm.h"

namespace deepinfer::model {

struct StepInputs {
    Tensor ids;        // [N] int32 on the device
    Tensor positions;  // [N] int64 on the device
    Tensor logit_rows; // [R] int32 on the device (undefined when R = 0)
};

StepInputs upload_step_inputs(const Batch& step, int64_t vocab_size, kernels::Backend& backend);

// A 1-D host tensor of `values`, uploaded.
Tensor upload_i64(const std::vector<int64_t>& values, kernels::Backend& backend);
Tensor upload_i32(const std::vector<int32_t>& values, kernels::Backend& backend);

}  // namespace deepinfer::model
