// The MTP head of DeepSeek-V4 checkpoints as a draft model (--speculative mtp). Its block is one
// more sliding-window layer of the target's cache: after each step its window ring takes the
// committed positions (their last-layer streams and next tokens), and drafting runs it on.
#include <algorithm>

#include "base/error.h"
#include "model/archs/deepseek_v4.h"
#include "model/archs/step_inputs.h"
#include "model/weight_loader.h"

namespace deepinfer::model {

// Release spelling (mtp.0.attn.wq_a.weight, mtp.0.hc_head_fn) or the HF-module spelling of our
// bundled model's trainer (mtp.0.block.self_attn.q_a_proj.weight, mtp.0.hc_head.hc_fn).
void DeepseekV4Model::load_mtp(const WeightLoader& loader) {
    if (!loader.has({"mtp.0.e_proj.weight"})) return;
    int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult;
    DeepseekV4Config block_cfg = cfg_;
    block_cfg.num_hidden_layers = 1;
    block_cfg.layer_types = {AttentionType::kSliding};
    block_cfg.mlp_layer_types = {MlpType::kMoe};
    bool hf = loader.has({"mtp.0.block.attn_hc.fn"}) || loader.has({"mtp.0.block.hc_attn_fn"});
    auto param = [&](Names n, std::vector<int64_t> shape) { return backend_.upload(loader.param(n, std::move(shape))); };
    auto matrix = [&](Names n, std::vector<int64_t> shape) { return backend_.upload(loader.linear(n, std::move(shape))); };
    auto mtp = std::make_unique<MtpWeights>();
    mtp->e_proj = matrix({"mtp.0.e_proj.weight"}, {D, D});
    mtp->h_proj = matrix({"mtp.0.h_proj.weight"}, {D, D});
    mtp->enorm = param({"mtp.0.enorm.weight"}, {D});
    mtp->hnorm = param({"mtp.0.hnorm.weight"}, {D});
    mtp->norm = param({"mtp.0.norm.weight"}, {D});
    mtp->hc_head = {param({"mtp.0.hc_head_fn", "mtp.0.hc_head.hc_fn"}, {hc, hc * D}),
                    param({"mtp.0.hc_head_base", "mtp.0.hc_head.hc_base"}, {hc}),
                    param({"mtp.0.hc_head_scale", "mtp.0.hc_head.hc_scale"}, {1})};
    w_.layers.push_back(load_deepseek_v4_block(block_cfg, 0, hf ? "mtp.0.block." : "mtp.0.", loader, backend_));
    cfg_.layer_types.push_back(AttentionType::kSliding);  // layer num_hidden_layers: the MTP block
    cfg_.mlp_layer_types.push_back(MlpType::kMoe);
    cache_layout_.layers.push_back({});  // its window ring
    mtp_ = std::move(mtp);
}

std::vector<DraftProposal> DeepseekV4Model::draft(const StepFeatures& features, std::span<const DraftCommit> commits,
                                                  std::span<const DraftAnchor> anchors, int max_tokens,
                                                  SequenceCache& sequence_cache) {
    auto* cache = dynamic_cast<HybridCache*>(&sequence_cache);
    DI_CHECK(cache != nullptr, "MTP drafting needs the model's HybridCache");
    int64_t hc = cfg_.hc_mult, D = cfg_.hidden_size;
    // The committed positions through the head: its ring takes them, and each anchor's first draft
    // comes from its last committed position (whose next token is the anchor).
    Batch rows;
    std::vector<int32_t> feature_rows;
    for (const DraftCommit& c : commits) {
        rows.seqs.push_back({static_cast<int32_t>(rows.token_ids.size()), c.rows.num_tokens, c.rows.start_pos,
                             c.rows.state_idx, c.rows.window_from});
        rows.token_ids.insert(rows.token_ids.end(), c.next_tokens.begin(), c.next_tokens.end());
        for (int32_t t = 0; t < c.rows.num_tokens; ++t) feature_rows.push_back(c.rows.token_begin + t);
    }
    std::vector<DraftProposal> out(anchors.size());
    if (rows.token_ids.empty()) return out;
    int64_t m = static_cast<int64_t>(feature_rows.size());
    Tensor streams = backend_.empty(DType::kF32, {m, hc * D});
    backend_.gather_rows(features.rows, upload_i32(feature_rows, backend_), streams);
    streams = streams.reshape({m, hc, D});
    std::vector<int32_t> last;  // per anchor: its last committed row
    for (const DraftAnchor& a : anchors) {
        auto it = std::find_if(rows.seqs.begin(), rows.seqs.end(), [&](const kernels::SeqSlice& s) {
            return s.state_idx == a.state && s.start_pos + s.num_tokens == a.position;
        });
        DI_CHECK(it != rows.seqs.end(), "MTP: an anchor at position {} without a commit ending there", a.position);
        last.push_back(it->token_begin + it->num_tokens - 1);
    }
    int64_t S = static_cast<int64_t>(anchors.size());
    mtp_block(rows, streams, *cache);  // the ring takes the commits
    if (S == 0 || max_tokens <= 0) return out;
    Tensor step_streams = backend_.empty(DType::kF32, {S, hc, D});
    backend_.gather_rows(streams, upload_i32(last, backend_), step_streams);
    Tensor step_logits = mtp_logits(step_streams);
    std::vector<int32_t> prev(S);
    choose_draft_tokens(backend_, anchors, 0, step_logits, prev, out);
    for (int k = 1; k < max_tokens; ++k) {  // draft k + 1 from draft k at the position after the last
        Batch next;
        for (int64_t s = 0; s < S; ++s)
            next.seqs.push_back({static_cast<int32_t>(s), 1, anchors[s].position + k - 1, anchors[s].state, anchors[s].context_from});
        next.token_ids = prev;
        step_logits = mtp_forward(next, step_streams, *cache);
        choose_draft_tokens(backend_, anchors, k, step_logits, prev, out);
    }
    return out;
}

}  // namespace deepinfer::model
