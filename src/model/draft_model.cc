#include "model/draft_model.h"

#include <algorithm>

namespace deepinfer::model {

void choose_draft_tokens(kernels::Backend& backend, std::span<const DraftAnchor> anchors, int64_t k,
                         const Tensor& logits, std::vector<int32_t>& prev, std::vector<DraftProposal>& out) {
    int64_t S = static_cast<int64_t>(anchors.size()), V = logits.dim(-1);
    std::vector<kernels::SampleRow> rows;
    for (const DraftAnchor& a : anchors) {
        kernels::SampleRow r = a.sampling;
        r.position = a.position + 1 + k;
        r.logprobs = -1, r.penalty_slot = -1, r.bias_count = 0;
        rows.push_back(r);
    }
    Tensor ids = backend.empty(DType::kI32, {S});
    bool sampled = std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.temperature > 0.0f && r.top_k != 1; });
    if (sampled) {
        kernels::SampleArgs args;
        args.logits = logits;
        args.rows = rows;
        args.tokens = ids;
        backend.sample_rows(args);
        std::vector<float> host(S * V);
        backend.download(logits, host.data());
        for (int64_t s = 0; s < S; ++s)
            if (rows[s].temperature > 0.0f && rows[s].top_k != 1) out[s].logits.emplace_back(host.begin() + s * V, host.begin() + (s + 1) * V);
    } else {
        backend.argmax_rows(logits, ids);
    }
    backend.download(ids, prev.data());
    for (int64_t s = 0; s < S; ++s) out[s].tokens.push_back(prev[s]);
}

}  // namespace deepinfer::model
