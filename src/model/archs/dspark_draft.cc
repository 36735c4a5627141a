#include "model/archs/dspark_draft.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/error.h"
#include "model/archs/delayed_mhc.h"
#include "model/archs/moe_block.h"
#include "model/archs/step_inputs.h"
#include "model/rope_freqs.h"

namespace deepinfer::model {

using kernels::QuantFormat;

// One block forward's state, carried from draft layer to draft layer like the target's StepState.
struct DSparkDraft::Block {
    std::vector<kernels::SeqSlice> seqs;
    int64_t n = 0;
    Tensor ids, positions;
    Tensor streams, pending_pre;  // [n, hc, D], [n, hc]: delayed mHC as in the target
    Tensor x, post, comb;
};

namespace {

// The draft layers as a V4 config: sliding-window attention, score-routed MoE of their own size.
DeepseekV4Config draft_layer_config(const DeepseekV41Config& cfg) {
    DeepseekV4Config c = cfg.base;
    c.num_hidden_layers = cfg.dspark.num_layers;
    c.n_routed_experts = cfg.dspark.n_routed_experts;
    c.num_experts_per_tok = cfg.dspark.num_experts_per_tok;
    c.layer_types.assign(c.num_hidden_layers, AttentionType::kSliding);
    c.mlp_layer_types.assign(c.num_hidden_layers, MlpType::kMoe);
    return c;
}

DSparkWeights load_weights(const DeepseekV41Config& cfg, const DeepseekV4Config& layer_cfg, const WeightLoader& w,
                           kernels::Backend& backend) {
    const DSparkConfig& d = cfg.dspark;
    int64_t D = cfg.base.hidden_size, r = d.markov_rank, V = cfg.base.vocab_size;
    int64_t taps = static_cast<int64_t>(d.target_layer_ids.size());
    std::string last = fmt::format("mtp.{}.", d.num_layers - 1);
    DSparkWeights out;
    out.main_proj = backend.upload(w.linear({"mtp.0.main_proj.weight"}, {D, taps * D}));
    out.main_norm = backend.upload(w.param({"mtp.0.main_norm.weight"}, {D}));
    for (int i = 0; i < d.num_layers; ++i) {
        std::string prefix = fmt::format("mtp.{}.", i);
        out.layers.push_back(load_deepseek_v4_block(layer_cfg, i, prefix, w, backend));
        if (cfg.gate_temp == 1.0f) continue;
        Tensor gate = w.matrix_f32_copy({prefix + "ffn.gate.weight"}, {layer_cfg.n_routed_experts, D});
        for (int64_t k = 0; k < gate.numel(); ++k) gate.data<float>()[k] /= cfg.gate_temp;  // as the target's routers
        out.layers.back().gate = backend.upload(gate);
    }
    out.norm = backend.upload(w.param({last + "norm.weight"}, {D}));
    out.markov_embed = backend.upload(w.matrix({last + "markov_head.embed.weight"}, {V, r}));
    out.markov_head = backend.upload(w.linear({last + "markov_head.head.weight"}, {V, r}));
    Tensor proj = w.param({last + "confidence_head.proj.weight"}, {1, D + r});
    Tensor hidden = Tensor::empty(DType::kF32, {1, D}), prev = Tensor::empty(DType::kF32, {1, r});
    std::copy_n(proj.data<float>(), D, hidden.data<float>());
    std::copy_n(proj.data<float>() + D, r, prev.data<float>());
    out.confidence_hidden = backend.upload(hidden);
    out.confidence_prev = backend.upload(prev);
    Names bias = {last + "confidence_head.proj.bias"};
    if (w.has(bias)) out.confidence_bias = w.param(bias, {1}).data<float>()[0];
    return out;
}

}  // namespace

DSparkDraft::DSparkDraft(const DeepseekV41Config& cfg, Tensor embed, Tensor head, const WeightLoader& loader,
                         kernels::Backend& backend)
    : cfg_(cfg), layer_cfg_(draft_layer_config(cfg)), backend_(backend), embed_(std::move(embed)),
      head_(std::move(head)) {
    DI_CHECK(cfg_.dspark.present(), "the checkpoint has no DSpark draft (no dspark_* keys in config.json)");
    w_ = load_weights(cfg_, layer_cfg_, loader, backend_);
    rope_ = make_rope(cfg_.base.rope_main, cfg_.base.rope_dim, backend_);
}

void DSparkDraft::allocate(int num_states) {
    num_states_ = num_states;
    rings_.clear();
    for (int i = 0; i < cfg_.dspark.num_layers; ++i)
        rings_.push_back(backend_.zeros(DType::kF32, {num_states, cfg_.base.sliding_window, cfg_.base.head_dim}));
}

std::vector<DraftProposal> DSparkDraft::draft(const StepFeatures& features, std::span<const DraftCommit> commits,
                                              std::span<const DraftAnchor> anchors, int max_tokens, SequenceCache&) {
    std::vector<kernels::SeqSlice> seqs;
    for (const DraftCommit& c : commits) seqs.push_back(c.rows);
    commit(seqs, features.rows);
    return propose(anchors, max_tokens);
}

void DSparkDraft::commit(std::span<const kernels::SeqSlice> seqs, const Tensor& taps) {
    const DeepseekV4Config& c = cfg_.base;
    int64_t n = taps.dim(0), D = c.hidden_size;
    if (n == 0 || seqs.empty()) return;
    std::vector<int64_t> positions(n, 0);
    for (const kernels::SeqSlice& s : seqs) {
        DI_CHECK(s.state_idx >= 0 && s.state_idx < num_states_, "DSpark: state {} outside the {} rings", s.state_idx,
                 num_states_);
        for (int t = 0; t < s.num_tokens; ++t) positions[s.token_begin + t] = s.start_pos + t;
    }
    Tensor pos = upload_i64(positions, backend_);
    Tensor m = backend_.empty(DType::kF32, {n, D});
    backend_.matmul(taps, w_.main_proj, m);
    backend_.rms_norm(m, &w_.main_norm, c.rms_norm_eps, m);
    for (int i = 0; i < cfg_.dspark.num_layers; ++i) {
        const V4LayerWeights& lw = w_.layers[i];
        Tensor kv = backend_.empty(DType::kF32, {n, c.head_dim});
        backend_.matmul(m, lw.wkv, kv);
        backend_.rms_norm_rope(kv, &lw.kv_norm, c.rms_norm_eps, pos, 1, rope_);
        backend_.fake_quantize(kv, QuantFormat::kFp8Ue8m0x32);
        backend_.ring_write(seqs, kv, rings_[i]);
    }
}

DraftBlock DSparkDraft::forward(std::span<const DraftAnchor> anchors) {
    const DeepseekV4Config& c = cfg_.base;
    int64_t T = cfg_.dspark.block_size, S = static_cast<int64_t>(anchors.size()), hc = c.hc_mult, D = c.hidden_size;
    Block b;
    b.n = S * T;
    std::vector<int32_t> ids;
    std::vector<int64_t> positions;
    std::vector<float> first(b.n * hc, 0.0f);  // the first mHC site reads stream 0
    for (int64_t s = 0; s < S; ++s) {
        const DraftAnchor& a = anchors[s];
        DI_CHECK(a.state >= 0 && a.state < num_states_, "DSpark: state {} outside the {} rings", a.state, num_states_);
        int64_t from = std::clamp<int64_t>(a.position - c.sliding_window, a.context_from, a.position);
        b.seqs.push_back({static_cast<int32_t>(s * T), static_cast<int32_t>(T), a.position, a.state, from});
        for (int64_t k = 0; k < T; ++k) {
            ids.push_back(k == 0 ? a.token : cfg_.dspark.noise_token_id);
            positions.push_back(a.position + k);
            first[(s * T + k) * hc] = 1.0f;
        }
    }
    for (int32_t id : ids) DI_CHECK(id >= 0 && id < c.vocab_size, "DSpark: anchor token {} is not in the vocabulary", id);
    b.ids = upload_i32(ids, backend_);
    b.positions = upload_i64(positions, backend_);
    b.streams = backend_.empty(DType::kF32, {b.n, hc, D});
    backend_.embed(b.ids, embed_, static_cast<int>(hc), b.streams);
    Tensor pre_host = Tensor::empty(DType::kF32, {b.n, hc});
    std::copy(first.begin(), first.end(), pre_host.data<float>());
    b.pending_pre = backend_.upload(pre_host);
    b.x = backend_.empty(DType::kF32, {b.n, D});
    b.post = backend_.empty(DType::kF32, {b.n, hc});
    b.comb = backend_.empty(DType::kF32, {b.n, hc, hc});
    for (int i = 0; i < cfg_.dspark.num_layers; ++i) {
        attention(i, b);
        feed_forward(i, b);
    }
    // The anchor's row drafts nothing: rows 1 .. T - 1 of each block.
    std::vector<int32_t> rows;
    for (int64_t s = 0; s < S; ++s)
        for (int64_t k = 1; k < T; ++k) rows.push_back(static_cast<int32_t>(s * T + k));
    int64_t m = static_cast<int64_t>(rows.size());
    Tensor dev_rows = upload_i32(rows, backend_);
    Tensor streams = backend_.empty(DType::kF32, {m, hc, D}), pre = backend_.empty(DType::kF32, {m, hc});
    backend_.gather_rows(b.streams, dev_rows, streams);
    backend_.gather_rows(b.pending_pre, dev_rows, pre);
    DraftBlock out;
    out.hidden = backend_.empty(DType::kF32, {m, D});
    backend_.hc_collapse(streams, pre, out.hidden);
    Tensor h = backend_.empty(DType::kF32, {m, D});
    backend_.rms_norm(out.hidden, &w_.norm, c.rms_norm_eps, h);
    out.base_logits = backend_.empty(DType::kF32, {m, c.vocab_size});
    backend_.matmul(h, head_, out.base_logits);
    return out;
}

std::vector<DraftProposal> DSparkDraft::propose(std::span<const DraftAnchor> anchors, int max_tokens) {
    int64_t S = static_cast<int64_t>(anchors.size()), T1 = std::min<int64_t>(drafts_per_block(), max_tokens);
    std::vector<DraftProposal> out(S);
    if (S == 0 || T1 <= 0) return out;
    DraftBlock block = forward(anchors);
    std::vector<int32_t> prev;
    for (const DraftAnchor& a : anchors) prev.push_back(a.token);
    for (int64_t k = 0; k < T1; ++k) {
        std::vector<int32_t> rows;
        for (int64_t s = 0; s < S; ++s) rows.push_back(static_cast<int32_t>(s * T1 + k));
        Tensor dev_rows = upload_i32(rows, backend_);
        Tensor logits = backend_.empty(DType::kF32, {S, cfg_.base.vocab_size});
        Tensor hidden = backend_.empty(DType::kF32, {S, cfg_.base.hidden_size});
        backend_.gather_rows(block.base_logits, dev_rows, logits);
        backend_.gather_rows(block.hidden, dev_rows, hidden);
        Tensor e = markov(logits, prev);
        std::vector<float> conf = confidence(hidden, e);
        choose_draft_tokens(backend_, anchors, k, logits, prev, out);
        for (int64_t s = 0; s < S; ++s) out[s].confidence.push_back(conf[s]);
    }
    return out;
}

Tensor DSparkDraft::markov(Tensor& logits, std::span<const int32_t> prev) {
    int64_t S = static_cast<int64_t>(prev.size()), r = cfg_.dspark.markov_rank;
    for (int32_t id : prev)
        DI_CHECK(id >= 0 && id < cfg_.base.vocab_size, "DSpark: previous token {} is not in the vocabulary", id);
    Tensor e = backend_.empty(DType::kF32, {S, 1, r});
    backend_.embed(upload_i32({prev.begin(), prev.end()}, backend_), w_.markov_embed, 1, e);
    e = e.reshape({S, r});
    Tensor correction = backend_.empty(DType::kF32, {S, cfg_.base.vocab_size});
    backend_.matmul(e, w_.markov_head, correction);
    backend_.add(correction, logits);
    return e;
}

std::vector<float> DSparkDraft::confidence(const Tensor& hidden, const Tensor& prev_embed) {
    int64_t S = hidden.dim(0);
    Tensor from_hidden = backend_.empty(DType::kF32, {S, 1}), from_prev = backend_.empty(DType::kF32, {S, 1});
    backend_.matmul(hidden, w_.confidence_hidden, from_hidden);
    backend_.matmul(prev_embed, w_.confidence_prev, from_prev);
    std::vector<float> a(S), b(S), out(S);
    backend_.download(from_hidden, a.data());
    backend_.download(from_prev, b.data());
    for (int64_t s = 0; s < S; ++s) out[s] = 1.0f / (1.0f + std::exp(-(a[s] + b[s] + w_.confidence_bias)));
    return out;
}

void DSparkDraft::enter_site(const MhcWeights& site, const Tensor& norm, Block& b) {
    enter_delayed_site(backend_, cfg_.base, site, norm, b.streams, b.pending_pre, b.x, b.post, b.comb);
}

void DSparkDraft::attention(int layer, Block& b) {
    const DeepseekV4Config& c = cfg_.base;
    const V4LayerWeights& lw = w_.layers[layer];
    int64_t n = b.n, H = c.num_attention_heads, d = c.head_dim;
    float eps = c.rms_norm_eps;
    enter_site(lw.attn_hc, lw.attn_norm, b);
    Tensor qr = backend_.empty(DType::kF32, {n, c.q_lora_rank}), kv = backend_.empty(DType::kF32, {n, d});
    Tensor q = backend_.empty(DType::kF32, {n, H, d});
    kernels::MatmulTarget from_x[] = {{&lw.wq_a, &qr}, {&lw.wkv, &kv}};
    backend_.matmul_many(b.x, from_x);
    kernels::NormRopeJob norms[] = {{&qr, true, &lw.q_norm, eps}, {&kv, true, &lw.kv_norm, eps, &rope_, 1}};
    backend_.norm_rope_many(norms, b.positions);
    backend_.matmul(qr, lw.wq_b, q);
    Tensor q_rows = q.reshape({n * H, d});
    backend_.rope(q_rows, b.positions, static_cast<int>(H), rope_, false);
    backend_.fake_quantize(kv, QuantFormat::kFp8Ue8m0x32);
    kernels::BlockAttentionArgs args{q, kv, rings_[layer], lw.sinks, 1.0f / std::sqrt(static_cast<float>(d)),
                                     backend_.empty(DType::kF32, {n, H, d})};
    backend_.block_attention(b.seqs, args);
    Tensor out_rows = args.out.reshape({n * H, d});
    backend_.rope(out_rows, b.positions, static_cast<int>(H), rope_, true);
    Tensor oa = backend_.empty(DType::kF32, {n, static_cast<int64_t>(c.o_groups) * c.o_lora_rank});
    backend_.grouped_matmul(args.out, lw.wo_a, c.o_groups, oa);
    Tensor y = backend_.empty(DType::kF32, {n, c.hidden_size});
    backend_.matmul(oa, lw.wo_b, y);
    backend_.hc_post(b.streams, y, b.post, b.comb);
}

void DSparkDraft::feed_forward(int layer, Block& b) {
    const V4LayerWeights& lw = w_.layers[layer];
    enter_site(lw.ffn_hc, lw.ffn_norm, b);
    Tensor y = backend_.empty(DType::kF32, {b.n, cfg_.base.hidden_size});
    moe_feed_forward(backend_, layer_cfg_, lw, false, b.x, b.ids, y);
    backend_.hc_post(b.streams, y, b.post, b.comb);
}

}  // namespace deepinfer::model
