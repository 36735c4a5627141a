#include "model/draft_model.h"

#include <algorithm>

#include "model/archs/step_inputs.h"

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
    auto drawn = [](const kernels::SampleRow& r) { return r.temperature > 0.0f && r.top_k != 1; };  // else greedy
    bool sampled = std::any_of(rows.begin(), rows.end(), drawn);
    if (sampled) {
        kernels::SampleArgs args;
        args.logits = logits;
        args.rows = rows;
        args.tokens = ids;
        backend.sample_rows(args);
        std::vector<float> host(S * V);
        backend.download(logits, host.data());
        for (int64_t s = 0; s < S; ++s)
            if (drawn(rows[s])) out[s].logits.emplace_back(host.begin() + s * V, host.begin() + (s + 1) * V);
    } else {
        backend.argmax_rows(logits, ids);
    }
    backend.download(ids, prev.data());
    for (int64_t s = 0; s < S; ++s) out[s].tokens.push_back(prev[s]);
}

std::vector<int32_t> last_rows(std::span<const kernels::SeqSlice> seqs, int keep,
                               std::vector<kernels::SeqSlice>& renumbered) {
    std::vector<int32_t> kept;
    renumbered.clear();
    for (const kernels::SeqSlice& sl : seqs) {
        int32_t skip = std::max(0, sl.num_tokens - keep);
        renumbered.push_back({static_cast<int32_t>(kept.size()), sl.num_tokens - skip, sl.start_pos + skip, sl.state_idx,
                              sl.window_from});
        for (int32_t t = skip; t < sl.num_tokens; ++t) kept.push_back(sl.token_begin + t);
    }
    return kept;
}

StepFeatures last_rows_of(kernels::Backend& backend, const Tensor& rows, std::span<const kernels::SeqSlice> seqs,
                          int keep) {
    StepFeatures out;
    std::vector<int32_t> kept = last_rows(seqs, keep, out.seqs);
    if (static_cast<int64_t>(kept.size()) == rows.dim(0)) return {rows, {seqs.begin(), seqs.end()}};
    out.rows = backend.empty(rows.dtype(), {static_cast<int64_t>(kept.size()), rows.dim(1)});
    if (!kept.empty()) backend.gather_rows(rows, upload_i32(kept, backend), out.rows);
    return out;
}

}  // namespace deepinfer::model
