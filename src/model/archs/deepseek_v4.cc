#include "model/archs/deepseek_v4.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/archs/moe_block.h"
#include "model/archs/step_inputs.h"
#include "model/config_file.h"
#include "model/rope_freqs.h"
#include "model/weight_loader.h"

namespace deepinfer::model {

using kernels::AttentionArgs;
using kernels::Backend;

struct DeepseekV4Model::StepTensors {
    explicit StepTensors(const Batch& s) : step(s) {}
    const Batch& step;
    std::vector<kernels::SeqSlice> compressor_seqs;  // the slices without cached-prefix rows
    int64_t n = 0;
    Tensor ids;        // [N] int32
    Tensor positions;  // [N] int64
    Tensor streams;    // [N, hc, D]
    // Scratch of the current block.
    Tensor x, post, comb;  // [N, D], [N, hc], [N, hc, hc]
    bool x_ready = false;  // x/post/comb already hold the next site's input (see close_site)
};

// The compressor and indexer projections of st.x (and the indexer's queries from q_a), computed
// with the layer's other projections of the same input in one matmul_many.
struct DeepseekV4Model::CompressorInputs {
    Tensor kv, gate;              // main compressor [N, c*d]
    Tensor index_kv, index_gate;  // indexer compressor [N, 2*di] (CSA)
    Tensor index_weights;         // [N, index heads] (CSA)
    Tensor index_q;               // [N, index heads, di] (CSA), from q_a
};

DeepseekV4Config load_deepseek_v4_config(const std::string& dir) { return parse_deepseek_v4_config(read_config_json(dir)); }

DeepseekV4Model::DeepseekV4Model(const std::string& dir, Backend& backend)
    : DeepseekV4Model(load_deepseek_v4_config(dir), Checkpoint(dir), backend) {}

DeepseekV4Model::DeepseekV4Model(DeepseekV4Config cfg, const Checkpoint& ckpt, Backend& backend, LoadOptions options)
    : HybridCacheModel(backend), cfg_(std::move(cfg)) {
    WeightLoader loader = prepare_loading(ckpt, cfg_.fp8_block, options, backend_, kernels::MatmulPrecision::kBf16x2);
    w_ = load_deepseek_v4_weights(cfg_, loader, backend_);
    rope_main_ = make_rope(cfg_.rope_main, cfg_.rope_dim, backend_);
    rope_compress_ = make_rope(cfg_.rope_compress, cfg_.rope_dim, backend_);
    cache_layout_ = v4_cache_layout(cfg_);
    cache_layout_.kv_dtype = kv_cache_dtype(options.precision, backend_);
    if (options.draft) load_mtp(loader);
}

CacheLayout v4_cache_layout(const DeepseekV4Config& c) {
    CacheLayout layout;
    layout.window = c.sliding_window;
    layout.head_dim = c.head_dim;
    layout.group_names = {"csa", "hca"};
    int64_t d = c.head_dim, di = c.index_head_dim;
    for (auto t : c.layer_types) {
        CacheLayout::Layer l;
        if (t == AttentionType::kCsa) {  // overlapping windows: two windows of kv | gate, c = 2
            int r = c.compress_rate_csa;
            layout.rates[0] = r;
            // At a window boundary the next entry still pools the previous window's rows.
            l = {0, d, di, {2 * r, 4 * d}, {2 * r, 4 * di}, r, r};
        } else if (t == AttentionType::kHca) {
            int r = c.compress_rate_hca;
            layout.rates[1] = r;
            l = {1, d, 0, {r, 2 * d}, {0, 0}};
        }
        layout.layers.push_back(l);
    }
    return layout;
}

// The compressors see only positions from Batch::compressed_until on: below it the entries and
// the carries at the boundary come from a cached prefix, and the rows there only refill the
// window rings (their replayed values need not equal the original ones).
std::vector<kernels::SeqSlice> DeepseekV4Model::compressor_slices(const Batch& step) {
    std::vector<kernels::SeqSlice> seqs = step.seqs;
    for (size_t s = 0; s < seqs.size() && s < step.compressed_until.size(); ++s) {
        kernels::SeqSlice& sl = seqs[s];
        int32_t skip = static_cast<int32_t>(std::clamp<int64_t>(step.compressed_until[s] - sl.start_pos, 0, sl.num_tokens));
        sl.token_begin += skip;
        sl.num_tokens -= skip;
        sl.start_pos += skip;
    }
    return seqs;
}

Tensor DeepseekV4Model::forward_described(const Batch& step, HybridCache& cache) {
    int64_t n = static_cast<int64_t>(step.token_ids.size()), hc = cfg_.hc_mult, D = cfg_.hidden_size;
    StepTensors st{step};
    st.n = n;
    st.compressor_seqs = compressor_slices(step);
    StepInputs in = upload_step_inputs(step, cfg_.vocab_size, backend_);
    st.ids = in.ids;
    st.positions = in.positions;
    st.streams = backend_.empty(DType::kF32, {n, hc, D});
    backend_.embed(st.ids, w_.embed, static_cast<int>(hc), st.streams);
    st.x = backend_.empty(DType::kF32, {n, D});
    st.post = backend_.empty(DType::kF32, {n, hc});
    st.comb = backend_.empty(DType::kF32, {n, hc, hc});
    for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
        attention_block(l, st, cache);
        ffn_block(l, st);
    }
    if (mtp_) features_ = last_rows_of(backend_, st.streams.reshape({n, hc * D}), step.seqs, cfg_.sliding_window);
    int64_t r = static_cast<int64_t>(step.logit_rows.size());
    if (r == 0) return backend_.empty(DType::kF32, {0, cfg_.vocab_size});
    // Decode steps want every row in order: no gather.
    bool all_rows = r == n;
    for (int64_t i = 0; all_rows && i < r; ++i) all_rows = step.logit_rows[i] == i;
    Tensor picked = all_rows ? st.streams : backend_.empty(DType::kF32, {r, hc, D});
    if (!all_rows) backend_.gather_rows(st.streams, in.logit_rows, picked);
    Tensor h = backend_.empty(DType::kF32, {r, D});
    backend_.hc_head(picked, w_.hc_head.fn, w_.hc_head.base, w_.hc_head.scale, mhc_params(), h);
    backend_.rms_norm(h, &w_.norm, cfg_.rms_norm_eps, h);
    Tensor logits = backend_.empty(DType::kF32, {r, cfg_.vocab_size});
    backend_.matmul(h, w_.head, logits);
    return logits;
}

Tensor DeepseekV4Model::mtp_forward(const Batch& rows, Tensor& streams, HybridCache& cache) {
    mtp_block(rows, streams, cache);
    return mtp_logits(streams);
}

void DeepseekV4Model::mtp_block(const Batch& rows, Tensor& streams, HybridCache& cache) {
    int64_t n = static_cast<int64_t>(rows.token_ids.size()), hc = cfg_.hc_mult, D = cfg_.hidden_size;
    float eps = cfg_.rms_norm_eps;
    StepTensors st{rows};
    st.n = n;
    StepInputs in = upload_step_inputs(rows, cfg_.vocab_size, backend_);
    st.ids = in.ids;
    st.positions = in.positions;
    Tensor e = backend_.empty(DType::kF32, {n, 1, D}), ep = backend_.empty(DType::kF32, {n, D});
    backend_.embed(st.ids, w_.embed, 1, e);
    e = e.reshape({n, D});
    backend_.rms_norm(e, &mtp_->enorm, eps, e);
    backend_.matmul(e, mtp_->e_proj, ep);
    Tensor h = backend_.empty(DType::kF32, {n * hc, D});
    backend_.rms_norm(streams.reshape({n * hc, D}), &mtp_->hnorm, eps, h);
    st.streams = backend_.empty(DType::kF32, {n, hc, D});
    Tensor projected = st.streams.reshape({n * hc, D});
    backend_.matmul(h, mtp_->h_proj, projected);
    // + e_proj(...) on every stream: the mHC update with post = 1 and comb = I.
    auto [post, comb] = mtp_broadcast_mix(n);
    backend_.hc_post(st.streams, ep, post, comb);
    st.x = backend_.empty(DType::kF32, {n, D});
    st.post = backend_.empty(DType::kF32, {n, hc});
    st.comb = backend_.empty(DType::kF32, {n, hc, hc});
    attention_block(cfg_.num_hidden_layers, st, cache);
    ffn_block(cfg_.num_hidden_layers, st);
    streams = st.streams;
}

Tensor DeepseekV4Model::mtp_logits(const Tensor& streams) {
    int64_t m = streams.dim(0), D = cfg_.hidden_size;
    Tensor x = backend_.empty(DType::kF32, {m, D});
    backend_.hc_head(streams, mtp_->hc_head.fn, mtp_->hc_head.base, mtp_->hc_head.scale, mhc_params(), x);
    backend_.rms_norm(x, &mtp_->norm, cfg_.rms_norm_eps, x);
    Tensor logits = backend_.empty(DType::kF32, {m, cfg_.vocab_size});
    backend_.matmul(x, w_.head, logits);
    return logits;
}

std::pair<Tensor, Tensor> DeepseekV4Model::mtp_broadcast_mix(int64_t n) {
    // Uploaded once and grown by doubling: every draft step of every request needs them.
    if (mtp_->broadcast_rows < n) {
        int64_t rows = std::max<int64_t>(n, 2 * mtp_->broadcast_rows), hc = cfg_.hc_mult;
        Tensor post = Tensor::empty(DType::kF32, {rows, hc}), comb = Tensor::zeros(DType::kF32, {rows, hc, hc});
        std::fill_n(post.data<float>(), post.numel(), 1.0f);
        for (int64_t i = 0; i < rows * hc; ++i) comb.data<float>()[i * hc + i % hc] = 1.0f;
        mtp_->ones_post = backend_.upload(post);
        mtp_->identity_comb = backend_.upload(comb);
        mtp_->broadcast_rows = rows;
    }
    return {mtp_->ones_post.rows(0, n), mtp_->identity_comb.rows(0, n)};
}

void DeepseekV4Model::attention_block(int l, StepTensors& st, HybridCache& cache) {
    const V4LayerWeights& lw = w_.layers[l];
    int64_t n = st.n, H = cfg_.num_attention_heads, d = cfg_.head_dim, D = cfg_.hidden_size;
    float eps = cfg_.rms_norm_eps;
    open_site(st, lw.attn_hc, lw.attn_norm);
    const kernels::Rope& rope = cfg_.layer_types[l] == AttentionType::kSliding ? rope_main_ : rope_compress_;

    bool compressed = cfg_.layer_types[l] != AttentionType::kSliding;
    Tensor qr = backend_.empty(DType::kF32, {n, cfg_.q_lora_rank}), kv = backend_.empty(DType::kF32, {n, d});
    std::vector<kernels::MatmulTarget> from_x = {{&lw.wq_a, &qr}, {&lw.wkv, &kv}};
    CompressorInputs comp;
    if (compressed) compressor_targets(l, n, comp, from_x);
    backend_.matmul_many(st.x, from_x);
    kernels::NormRopeJob from_x_norms[] = {{&qr, true, &lw.q_norm, eps}, {&kv, true, &lw.kv_norm, eps, &rope, 1}};
    backend_.norm_rope_many(from_x_norms, st.positions);
    Tensor q = backend_.empty(DType::kF32, {n, H, d});
    std::vector<kernels::MatmulTarget> from_qr = {{&lw.wq_b, &q}};
    if (comp.index_q.defined()) from_qr.push_back({&lw.index_wq_b, &comp.index_q});
    backend_.matmul_many(qr, from_qr);
    if (comp.index_q.defined()) {  // the indexer's queries (CSA) take the compressed rope
        Tensor rows = comp.index_q.reshape({n * cfg_.index_n_heads, cfg_.index_head_dim});
        backend_.rope(rows, st.positions, static_cast<int>(cfg_.index_n_heads), rope_compress_, false);
    }

    HybridCache::LayerState& ls = cache.layer(l);
    AttentionArgs args;
    args.q = q;
    args.kv = kv;
    args.ring = ls.ring;
    args.window = cfg_.sliding_window;
    args.sinks = lw.sinks;
    args.scale = 1.0f / std::sqrt(static_cast<float>(d));
    args.out = backend_.empty(DType::kF32, {n, H, d});
    kernels::EntryStore entries;
    if (compressed) {
        entries = kernels::EntryStore{ls.entries, st.step.tables_of(cache_layout_.layers[l].group)};
        compressed_keys(l, st, cache, comp, entries, args);
    }
    // Query heads normalised and roped first; keys into the ring, output de-roped after.
    backend_.attend_and_store(st.step.seqs, args, st.positions, rope, {true, eps, &rope});
    Tensor oa = backend_.empty(DType::kF32, {n, static_cast<int64_t>(cfg_.o_groups) * cfg_.o_lora_rank});
    backend_.grouped_matmul(args.out, lw.wo_a, cfg_.o_groups, oa);
    Tensor y = backend_.empty(DType::kF32, {n, D});
    backend_.matmul(oa, lw.wo_b, y);
    close_site(st, y, &lw.ffn_hc, &lw.ffn_norm);
}

void DeepseekV4Model::compressor_targets(int l, int64_t n, CompressorInputs& in, std::vector<kernels::MatmulTarget>& from_x) {
    const V4LayerWeights& lw = w_.layers[l];
    bool csa = cfg_.layer_types[l] == AttentionType::kCsa;
    int64_t c = csa ? 2 : 1, d = cfg_.head_dim;
    in.kv = backend_.empty(DType::kF32, {n, c * d});
    in.gate = backend_.empty(DType::kF32, {n, c * d});
    from_x.push_back({&lw.compressor.wkv, &in.kv});
    from_x.push_back({&lw.compressor.wgate, &in.gate});
    if (!csa) return;
    int64_t di = cfg_.index_head_dim, hi = cfg_.index_n_heads;
    in.index_kv = backend_.empty(DType::kF32, {n, 2 * di});
    in.index_gate = backend_.empty(DType::kF32, {n, 2 * di});
    in.index_weights = backend_.empty(DType::kF32, {n, hi});
    in.index_q = backend_.empty(DType::kF32, {n, hi, di});
    from_x.push_back({&lw.index_compressor.wkv, &in.index_kv});
    from_x.push_back({&lw.index_compressor.wgate, &in.index_gate});
    from_x.push_back({&lw.index_weights_proj, &in.index_weights});
}

void DeepseekV4Model::compressed_keys(int l, StepTensors& st, HybridCache& cache, CompressorInputs& in,
                                      kernels::EntryStore& entries, AttentionArgs& args) {
    const V4LayerWeights& lw = w_.layers[l];
    HybridCache::LayerState& ls = cache.layer(l);
    int64_t n = st.n, d = cfg_.head_dim;
    bool csa = cfg_.layer_types[l] == AttentionType::kCsa;
    int rate = cfg_.compress_rate(l);

    kernels::CompressorArgs ca;
    ca.kv = in.kv;
    ca.gate = in.gate;
    ca.ape = lw.compressor.ape;
    ca.norm = lw.compressor.norm;
    ca.norm_eps = cfg_.rms_norm_eps;
    ca.rope = rope_compress_;
    ca.rate = rate;
    ca.dim = static_cast<int>(d);
    ca.overlap = csa;
    ca.carry = ls.carry;
    ca.out = &entries;
    backend_.compressor_update(st.compressor_seqs, ca);
    args.entries = &entries;
    if (!csa) {
        args.compressed = AttentionArgs::Compressed::kAllVisible;
        args.rate = rate;
        return;
    }
    // Lightning indexer: its own compressor over index keys, queries from the shared q_a output.
    int64_t di = cfg_.index_head_dim, hi = cfg_.index_n_heads;
    kernels::EntryStore index_store{ls.index_entries, st.step.tables_of(cache_layout_.layers[l].group)};
    kernels::CompressorArgs ia = ca;
    ia.kv = in.index_kv;
    ia.gate = in.index_gate;
    ia.ape = lw.index_compressor.ape;
    ia.norm = lw.index_compressor.norm;
    ia.dim = static_cast<int>(di);
    ia.carry = ls.index_carry;
    ia.out = &index_store;
    backend_.compressor_update(st.compressor_seqs, ia);

    kernels::IndexerArgs xa;
    xa.q = in.index_q;  // roped in attention_block
    xa.weights = in.index_weights;
    xa.keys = &index_store;
    xa.rate = rate;
    xa.top_k = cfg_.index_topk;
    xa.out = backend_.empty(DType::kI32, {n, static_cast<int64_t>(cfg_.index_topk)});
    xa.scale = 1.0f / std::sqrt(static_cast<float>(hi) * static_cast<float>(di));
    backend_.indexer_topk(st.step.seqs, xa);
    args.compressed = AttentionArgs::Compressed::kSelected;
    args.selected = xa.out;
}

void DeepseekV4Model::ffn_block(int l, StepTensors& st) {
    const V4LayerWeights& lw = w_.layers[l];
    int64_t n = st.n, D = cfg_.hidden_size;
    open_site(st, lw.ffn_hc, lw.ffn_norm);
    Tensor y = backend_.empty(DType::kF32, {n, D});
    moe_feed_forward(backend_, cfg_, lw, cfg_.mlp_layer_types[l] == MlpType::kHashMoe, st.x, st.ids, y);
    bool last = l + 1 >= cfg_.num_hidden_layers;  // the backbone's last layer, or the MTP block after it
    close_site(st, y, last ? nullptr : &w_.layers[l + 1].attn_hc, last ? nullptr : &w_.layers[l + 1].attn_norm);
}

kernels::MhcParams DeepseekV4Model::mhc_params() const {
    return {cfg_.hc_mult, cfg_.hc_sinkhorn_iters, cfg_.hc_eps, cfg_.rms_norm_eps};
}

// An mHC site's input: the streams collapsed and normalised, unless the previous site's
// close_site already did it (fused with its stream update).
void DeepseekV4Model::open_site(StepTensors& st, const MhcWeights& hc, const Tensor& norm) {
    if (st.x_ready) {
        st.x_ready = false;
        return;
    }
    float eps = cfg_.rms_norm_eps;
    backend_.hc_pre_norm(st.streams, hc.fn, hc.base, hc.scale, mhc_params(), norm, eps, st.x, st.post, st.comb);
}

// Adds a site's output y to the streams; with the next site's weights, also prepares its input.
void DeepseekV4Model::close_site(StepTensors& st, const Tensor& y, const MhcWeights* next_hc, const Tensor* next_norm) {
    if (next_hc == nullptr) {
        backend_.hc_post(st.streams, y, st.post, st.comb);
        return;
    }
    backend_.hc_post_pre_norm(st.streams, y, st.post, st.comb, next_hc->fn, next_hc->base, next_hc->scale, mhc_params(),
                              *next_norm, cfg_.rms_norm_eps, st.x);
    st.x_ready = true;
}

}  // namespace deepinfer::model
