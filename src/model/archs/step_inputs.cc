#include "model/archs/step_inputs.h"

#include <algorithm>

#include "base/error.h"

namespace deepinfer::model {

StepInputs upload_step_inputs(const Batch& step, int64_t vocab_size, kernels::Backend& backend) {
    int64_t n = static_cast<int64_t>(step.token_ids.size());
    Tensor ids = Tensor::empty(DType::kI32, {n}), pos = Tensor::empty(DType::kI64, {n});
    for (int64_t i = 0; i < n; ++i) {
        int32_t t = step.token_ids[i];
        DI_CHECK(t >= 0 && t < vocab_size, "forward: token id {} is out of range (vocab {})", t, vocab_size);
        ids.data<int32_t>()[i] = t;
    }
    for (const auto& s : step.seqs) {
        DI_CHECK(s.token_begin + s.num_tokens <= n, "forward: sequence slice past the batch");
        for (int t = 0; t < s.num_tokens; ++t) pos.data<int64_t>()[s.token_begin + t] = s.start_pos + t;
    }
    StepInputs in{backend.upload(ids), backend.upload(pos), Tensor()};
    if (!step.logit_rows.empty()) in.logit_rows = upload_i32(step.logit_rows, backend);
    return in;
}

namespace {

template <typename T>
Tensor upload_vector(const std::vector<T>& values, DType dtype, kernels::Backend& backend) {
    Tensor t = Tensor::empty(dtype, {static_cast<int64_t>(values.size())});
    std::copy(values.begin(), values.end(), t.data<T>());
    return backend.upload(t);
}

}  // namespace

Tensor upload_i64(const std::vector<int64_t>& values, kernels::Backend& backend) {
    return upload_vector(values, DType::kI64, backend);
}

Tensor upload_i32(const std::vector<int32_t>& values, kernels::Backend& backend) {
    return upload_vector(values, DType::kI32, backend);
}

}  // namespace deepinfer::model
