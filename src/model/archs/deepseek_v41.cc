#include "model/archs/deepseek_v41.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/archs/delayed_mhc.h"
#include "model/archs/moe_block.h"
#include "model/archs/step_inputs.h"
#include "model/config_file.h"
#include "model/rope_freqs.h"
#include "model/weight_loader.h"
#include "tokenizer/engram_token_map.h"

namespace deepinfer::model {

using kernels::AttentionArgs;
using kernels::Backend;
using kernels::QuantFormat;

// What one step carries from layer to layer: the residual streams, the delayed mHC collapse
// weights, and what the latest KV / index / candidate sources published for later layers.
struct DeepseekV41Model::StepState {
    explicit StepState(const Batch& s) : step(s) {}
    const Batch& step;
    std::vector<kernels::SeqSlice> seqs;  // the step's slices (trimmed for the late layers by replay)
    bool rebuild_windows = false;         // encoder replay: compressed state is cached already
    int64_t n = 0;
    StepInputs in;
    Tensor streams;            // [N, hc, D]
    Tensor pending_pre;        // [N, hc]: collapses the streams at the next mHC site
    Tensor x, post, comb;      // scratch of the current block
    kernels::EntryStore entries, index_keys;  // of the latest KV source
    Tensor selected;           // [N, index_topk] picks of the latest index source
    Tensor candidates;         // [N, candidate_topk_blocks] blocks of the candidate source
    std::vector<int64_t> engram_rows;  // [N of the step, Engram layers, columns] table rows
    std::vector<int32_t> origin;       // current row -> row of the step (replay drops rows)
    std::vector<Tensor> taps;          // DSpark: [N, D] per tap layer passed so far
    Tensor tap_mean;                   // DSpark: [N, hc] of 1 / hc, the collapse that averages the streams
};

// A source layer's projections of the collapsed input x (and the indexer's queries from q_a),
// computed with the attention's own projections of the same inputs in one matmul_many each.
struct DeepseekV41Model::SourceInputs {
    Tensor comp_kv, comp_gate;       // KV source (the gate at ratio > 1); not on encoder replay
    Tensor index_q, index_weights;   // index source
};

DeepseekV41Config load_deepseek_v41_config(const std::string& dir) { return parse_deepseek_v41_config(read_config_json(dir)); }

DeepseekV41Model::DeepseekV41Model(const std::string& dir, Backend& backend)
    : DeepseekV41Model(load_deepseek_v41_config(dir), Checkpoint(dir), backend) {}

DeepseekV41Model::DeepseekV41Model(DeepseekV41Config cfg, const Checkpoint& ckpt, Backend& backend, LoadOptions options)
    : HybridCacheModel(backend), cfg_(std::move(cfg)) {
    // FP8 / FP4 fake quantisation of KV, entries and indexer inputs rounds to coarse grids: on its
    // own the architecture keeps fp32's precision in GEMMs, or different roundings follow.
    WeightLoader loader = prepare_loading(ckpt, cfg_.base.fp8_block, options, backend_, kernels::MatmulPrecision::kFp32);
    w_ = load_deepseek_v41_weights(cfg_, loader, backend_);
    rope_main_ = make_rope(cfg_.base.rope_main, cfg_.base.rope_dim, backend_);
    rope_compress_ = make_rope(cfg_.base.rope_compress, cfg_.base.rope_dim, backend_);
    cache_layout_ = v41_cache_layout(cfg_);
    cache_layout_.kv_dtype = kv_cache_dtype(options.precision, backend_);
    if (!cfg_.engram.layer_ids.empty()) load_engram(ckpt, loader);
    if (options.draft && cfg_.dspark.present())
        dspark_ = std::make_unique<DSparkDraft>(cfg_, w_.core.embed, w_.core.head, loader, backend_);
}

// The hashes read token classes derived from the tokenizer, so it must be the one the model
// was trained with: its class count has to match the config.
void DeepseekV41Model::load_engram(const Checkpoint& ckpt, const WeightLoader& loader) {
    auto tok = tokenizer::Tokenizer::from_dir(ckpt.dir());
    tokenizer::EngramTokenMap map = tokenizer::engram_token_map(*tok);
    DI_CHECK(map.num_classes == cfg_.engram.compressed_vocab_size,
             "Engram: the tokenizer in {} yields {} token classes, the config says engram_compressed_vocab_size = {} "
             "(a different tokenizer would hash every n-gram to the wrong rows)",
             ckpt.dir(), map.num_classes, cfg_.engram.compressed_vocab_size);
    engram_hasher_ = std::make_unique<EngramHasher>(cfg_.engram, std::move(map.class_of));
    for (int l : cfg_.engram.layer_ids) engram_.push_back(load_engram_weights(cfg_, l, loader, backend_));
}

CacheLayout v41_cache_layout(const DeepseekV41Config& c) {
    CacheLayout layout;
    layout.window = c.base.sliding_window;
    layout.head_dim = c.base.head_dim;
    std::vector<int> ratios;
    for (int l : c.kv_source_layer_ids) ratios.push_back(c.compress_ratios[l]);
    std::sort(ratios.begin(), ratios.end(), std::greater<>());
    ratios.erase(std::unique(ratios.begin(), ratios.end()), ratios.end());
    DI_CHECK(ratios.size() <= static_cast<size_t>(kBlockGroups), "cache: {} distinct KV-source ratios (at most {})",
             ratios.size(), kBlockGroups);
    for (size_t g = 0; g < ratios.size(); ++g) {
        layout.rates[g] = ratios[g];
        layout.group_names[g] = ratios[g] == 1 ? "entries_r1" : "entries_r" + std::to_string(ratios[g]);
    }
    int64_t d = c.base.head_dim, di = c.base.index_head_dim;
    for (int l = 0; l < c.base.num_hidden_layers; ++l) {
        CacheLayout::Layer layer;
        if (c.is_kv_source(l)) {
            int r = c.compress_ratios[l];
            layer.group = static_cast<int>(std::find(ratios.begin(), ratios.end(), r) - ratios.begin());
            layer.entry_dim = d;
            layer.index_dim = di;
            if (r > 1) layer.carry = {r, 2 * d};
        }
        layout.layers.push_back(layer);
    }
    return layout;
}

bool DeepseekV41Model::configure_swa_replay(int tokens, int rollback) {
    if (cfg_.kv_source_layer_ids.empty()) return false;
    int window = cfg_.base.sliding_window;
    DI_CHECK(tokens == 0 || tokens >= window + rollback,
             "SWA bounded replay of {} tokens does not cover the sliding window ({}) plus the rollback depth ({}): "
             "use at least {} (or 0 to turn it off)",
             tokens, window, rollback, window + rollback);
    replay_tokens_ = tokens;
    return true;
}

int DeepseekV41Model::first_late_layer() const {
    return *std::max_element(cfg_.kv_source_layer_ids.begin(), cfg_.kv_source_layer_ids.end()) + 1;
}

Tensor DeepseekV41Model::forward_described(const Batch& batch, HybridCache& cache) {
    StepState st{batch};
    start_step(st);
    std::vector<int64_t> late_from = late_positions(batch);
    int late_start = late_from.empty() ? -1 : first_late_layer();
    for (int l = 0; l < cfg_.base.num_hidden_layers; ++l) {
        if (l == late_start) enter_late_layers(st, late_from);
        record_tap(l, st);
        apply_engram(l, st);
        attention_block(l, st, cache);
        ffn_block(l, st);
    }
    finish_taps(st);
    return final_logits(st);
}

void DeepseekV41Model::rebuild_windows(const Batch& step, HybridCache& cache) {
    Batch copy;
    StepState st{described(step, cache, copy)};
    st.rebuild_windows = true;
    start_step(st);
    for (auto& s : st.seqs) s.window_from = s.start_pos;  // nothing before the replay is in any ring
    for (int l = 0; l < cfg_.base.num_hidden_layers; ++l) {
        apply_engram(l, st);
        attention_block(l, st, cache);
        ffn_block(l, st);
    }
}

void DeepseekV41Model::start_step(StepState& st) {
    const DeepseekV4Config& c = cfg_.base;
    const Batch& batch = st.step;
    int64_t n = static_cast<int64_t>(batch.token_ids.size()), hc = c.hc_mult, D = c.hidden_size;
    st.n = n;
    st.seqs = batch.seqs;
    st.in = upload_step_inputs(batch, c.vocab_size, backend_);
    st.streams = backend_.empty(DType::kF32, {n, hc, D});
    backend_.embed(st.in.ids, w_.core.embed, static_cast<int>(hc), st.streams);
    Tensor first = Tensor::zeros(DType::kF32, {n, hc});  // the first site reads stream 0
    for (int64_t i = 0; i < n; ++i) first.data<float>()[i * hc] = 1.0f;
    st.pending_pre = backend_.upload(first);
    allocate_scratch(st);
    st.origin.resize(n);
    for (int64_t i = 0; i < n; ++i) st.origin[i] = static_cast<int32_t>(i);
    if (engram_hasher_) hash_engram_rows(st);
}

// Each position's look-back: this step's earlier tokens, then the sequence's context tokens.
void DeepseekV41Model::hash_engram_rows(StepState& st) {
    const Batch& b = st.step;
    int span = cfg_.engram.max_ngram_size, per_row = static_cast<int>(cfg_.engram.layer_ids.size()) * cfg_.engram.columns();
    st.engram_rows.assign(st.n * per_row, 0);
    std::vector<int32_t> window(span);
    for (size_t s = 0; s < b.seqs.size(); ++s) {
        const kernels::SeqSlice& sl = b.seqs[s];
        const std::vector<int32_t> none;
        const std::vector<int32_t>& ctx = s < b.context_tokens.size() ? b.context_tokens[s] : none;
        DI_CHECK(static_cast<int64_t>(ctx.size()) >= std::min<int64_t>(sl.start_pos, span - 1),
                 "Engram needs the {} tokens before position {} of a sequence (Batch::context_tokens)", span - 1,
                 sl.start_pos);
        for (int t = 0; t < sl.num_tokens; ++t) {
            int64_t pos = sl.start_pos + t;
            for (int k = 0; k < span; ++k) {
                int64_t p = pos - k;
                window[k] = p < 0 ? -1 : p >= sl.start_pos ? b.token_ids[sl.token_begin + (p - sl.start_pos)]
                                                           : ctx[ctx.size() - (sl.start_pos - p)];
            }
            engram_hasher_->rows(window, st.engram_rows.data() + (sl.token_begin + t) * per_row);
        }
    }
}

void DeepseekV41Model::apply_engram(int l, StepState& st) {
    int idx = cfg_.engram_index(l);
    if (idx < 0 || st.n == 0) return;
    const EngramLayerWeights& ew = engram_[idx];
    int cols = cfg_.engram.columns(), per_row = static_cast<int>(cfg_.engram.layer_ids.size()) * cols;
    std::vector<int64_t> rows(st.n * cols);
    for (int64_t r = 0; r < st.n; ++r)
        std::copy_n(st.engram_rows.data() + st.origin[r] * per_row + idx * cols, cols, rows.data() + r * cols);
    Tensor e = Tensor::empty(DType::kF32, {st.n, cols * static_cast<int64_t>(cfg_.engram.head_dim)});
    gather_engram_rows(ew, rows.data(), st.n, cols, e);
    const DeepseekV4Config& c = cfg_.base;
    Tensor kv = backend_.empty(DType::kF32, {st.n, (c.hc_mult + 1) * c.hidden_size});
    backend_.matmul(backend_.upload(e), ew.wkv, kv);
    backend_.engram_gate(st.streams, kv, ew.weight, c.rms_norm_eps);
}

void DeepseekV41Model::allocate_scratch(StepState& st) {
    int64_t hc = cfg_.base.hc_mult;
    st.x = backend_.empty(DType::kF32, {st.n, cfg_.base.hidden_size});
    st.post = backend_.empty(DType::kF32, {st.n, hc});
    st.comb = backend_.empty(DType::kF32, {st.n, hc, hc});
}

// Decoder replay: per sequence, the first position the late layers compute (empty = all).
std::vector<int64_t> DeepseekV41Model::late_positions(const Batch& batch) const {
    if (replay_tokens_ <= 0 || batch.prompt_lengths.size() != batch.seqs.size()) return {};
    std::vector<int64_t> from;
    bool any = false;
    for (int64_t len : batch.prompt_lengths) {
        from.push_back(std::max<int64_t>(0, len - replay_tokens_));
        any = any || from.back() > 0;
    }
    return any ? from : std::vector<int64_t>{};
}

// The late layers own nothing but their window rings, so a prompt token they would only pass on
// to positions beyond its window is dropped: each sequence keeps its rows from late_from on, and
// its windows in these layers start there.
void DeepseekV41Model::enter_late_layers(StepState& st, const std::vector<int64_t>& late_from) {
    std::vector<int32_t> keep, remap(st.n, -1);
    std::vector<int64_t> positions;
    for (size_t s = 0; s < st.seqs.size(); ++s) {
        kernels::SeqSlice& sl = st.seqs[s];
        int32_t skip = static_cast<int32_t>(std::clamp<int64_t>(late_from[s] - sl.start_pos, 0, sl.num_tokens));
        int32_t begin = static_cast<int32_t>(keep.size());
        for (int32_t t = skip; t < sl.num_tokens; ++t) {
            remap[sl.token_begin + t] = static_cast<int32_t>(keep.size());
            keep.push_back(sl.token_begin + t);
            positions.push_back(sl.start_pos + t);
        }
        sl = {begin, sl.num_tokens - skip, sl.start_pos + skip, sl.state_idx, std::max(late_from[s], sl.window_from)};
    }
    if (static_cast<int64_t>(keep.size()) == st.n) return;
    std::vector<int32_t> logit_rows;
    for (int32_t r : st.step.logit_rows) {
        DI_CHECK(remap[r] >= 0, "bounded replay: logits were requested for a row before the replayed tail");
        logit_rows.push_back(remap[r]);
    }
    Tensor dev_rows = upload_i32(keep, backend_);
    auto gather = [&](Tensor& t) {  // 4-byte rows: fp32 activations or int32 picks
        if (!t.defined()) return;
        std::vector<int64_t> shape = t.shape();
        shape[0] = static_cast<int64_t>(keep.size());
        Tensor out = backend_.empty(t.dtype(), shape);
        backend_.gather_rows(t, dev_rows, out);
        t = out;
    };
    gather(st.streams);
    gather(st.pending_pre);
    for (Tensor& t : st.taps) gather(t);
    gather(st.selected);
    gather(st.candidates);
    Tensor ids = st.in.ids.reshape({st.n, 1});
    gather(ids);
    st.in.ids = ids.reshape({static_cast<int64_t>(keep.size())});
    st.in.positions = upload_i64(positions, backend_);
    if (!logit_rows.empty()) st.in.logit_rows = upload_i32(logit_rows, backend_);
    std::vector<int32_t> origin;
    for (int32_t k : keep) origin.push_back(st.origin[k]);
    st.origin = std::move(origin);
    st.n = static_cast<int64_t>(keep.size());
    allocate_scratch(st);
}

Tensor DeepseekV41Model::final_logits(StepState& st) {
    const DeepseekV4Config& c = cfg_.base;
    int64_t r = st.in.logit_rows.defined() ? st.in.logit_rows.numel() : 0, hc = c.hc_mult, D = c.hidden_size;
    if (r == 0) return backend_.empty(DType::kF32, {0, c.vocab_size});
    Tensor streams = backend_.empty(DType::kF32, {r, hc, D}), pre = backend_.empty(DType::kF32, {r, hc});
    backend_.gather_rows(st.streams, st.in.logit_rows, streams);
    backend_.gather_rows(st.pending_pre, st.in.logit_rows, pre);
    Tensor h = backend_.empty(DType::kF32, {r, D});
    backend_.hc_collapse(streams, pre, h);
    backend_.rms_norm(h, &w_.core.norm, c.rms_norm_eps, h);
    Tensor logits = backend_.empty(DType::kF32, {r, c.vocab_size});
    backend_.matmul(h, w_.core.head, logits);
    return logits;
}

void DeepseekV41Model::record_tap(int l, StepState& st) {
    const std::vector<int>& taps = cfg_.dspark.target_layer_ids;
    if (!dspark_ || std::find(taps.begin(), taps.end(), l) == taps.end()) return;
    int64_t hc = cfg_.base.hc_mult;
    if (!st.tap_mean.defined() || st.tap_mean.dim(0) != st.n) {  // once per step (again after replay drops rows)
        Tensor mean = Tensor::empty(DType::kF32, {st.n, hc});
        std::fill_n(mean.data<float>(), mean.numel(), 1.0f / static_cast<float>(hc));
        st.tap_mean = backend_.upload(mean);
    }
    Tensor tap = backend_.empty(DType::kF32, {st.n, cfg_.base.hidden_size});
    backend_.hc_collapse(st.streams, st.tap_mean, tap);
    st.taps.push_back(tap);
}

// The taps in the config's order, each row's side by side: stacked tap-major, then gathered
// row-major ([taps * n, D] read as [n, taps * D]), for each slice's last `sliding_window` rows
// only (the draft's context holds no more).
void DeepseekV41Model::finish_taps(StepState& st) {
    if (!dspark_) return;
    const std::vector<int>& layers = cfg_.dspark.target_layer_ids;
    int64_t k = static_cast<int64_t>(layers.size()), n = st.n, D = cfg_.base.hidden_size;
    Tensor stacked = backend_.empty(DType::kF32, {k * n, D});
    for (int64_t j = 0; j < k; ++j) {
        // st.taps follows layer order; the config may list the layers in another.
        int64_t passed = std::count_if(layers.begin(), layers.end(), [&](int l) { return l < layers[j]; });
        Tensor dst = stacked.rows(j * n, (j + 1) * n);
        backend_.copy(st.taps[passed], dst);
    }
    std::vector<kernels::SeqSlice> seqs;
    std::vector<int32_t> order;
    for (int32_t r : last_rows(st.seqs, cfg_.base.sliding_window, seqs))
        for (int64_t j = 0; j < k; ++j) order.push_back(static_cast<int32_t>(j * n + r));
    int64_t m = static_cast<int64_t>(order.size()) / std::max<int64_t>(k, 1);
    Tensor rows = backend_.empty(DType::kF32, {k * m, D});
    if (m > 0) backend_.gather_rows(stacked, upload_i32(order, backend_), rows);
    taps_ = {rows.reshape({m, k * D}), std::move(seqs)};
}

void DeepseekV41Model::enter_site(const MhcWeights& site, const Tensor& norm, StepState& st) {
    enter_delayed_site(backend_, cfg_.base, site, norm, st.streams, st.pending_pre, st.x, st.post, st.comb);
}

void DeepseekV41Model::attention_block(int l, StepState& st, HybridCache& cache) {
    const DeepseekV4Config& c = cfg_.base;
    const V4LayerWeights& lw = w_.core.layers[l];
    int64_t n = st.n, H = c.num_attention_heads, d = c.head_dim, D = c.hidden_size;
    float eps = c.rms_norm_eps;
    enter_site(lw.attn_hc, lw.attn_norm, st);
    int ratio = cfg_.compress_ratios[l];
    const kernels::Rope& rope = ratio > 0 ? rope_compress_ : rope_main_;

    Tensor qr = backend_.empty(DType::kF32, {n, c.q_lora_rank}), kv = backend_.empty(DType::kF32, {n, d});
    Tensor q = backend_.empty(DType::kF32, {n, H, d});
    std::vector<kernels::MatmulTarget> from_x = {{&lw.wq_a, &qr}, {&lw.wkv, &kv}}, from_qr = {{&lw.wq_b, &q}};
    SourceInputs src;
    if (ratio > 0) source_targets(l, st, src, from_x, from_qr);
    backend_.matmul_many(st.x, from_x);
    kernels::NormRopeJob from_x_norms[] = {{&qr, true, &lw.q_norm, eps}, {&kv, true, &lw.kv_norm, eps, &rope, 1}};
    backend_.norm_rope_many(from_x_norms, st.in.positions);
    backend_.matmul_many(qr, from_qr);
    backend_.fake_quantize(kv, QuantFormat::kFp8Ue8m0x32);

    HybridCache::LayerState& ls = cache.layer(l);
    AttentionArgs args;
    args.q = q;
    args.kv = kv;
    args.ring = ls.ring;
    args.window = c.sliding_window;
    args.sinks = lw.sinks;
    args.scale = 1.0f / std::sqrt(static_cast<float>(d));
    args.out = backend_.empty(DType::kF32, {n, H, d});
    if (ratio > 0) {
        if (cfg_.is_kv_source(l)) publish_source(l, st, cache, src);
        if (cfg_.is_index_source(l)) select_entries(l, st, src);
        args.entries = &st.entries;
        args.compressed = AttentionArgs::Compressed::kSelected;
        args.selected = st.selected;
    }
    // Query heads roped first (no per-head q norm in V4.1); keys into the ring, output de-roped after.
    backend_.attend_and_store(st.seqs, args, st.in.positions, rope, {false, eps, &rope});
    Tensor oa = backend_.empty(DType::kF32, {n, static_cast<int64_t>(c.o_groups) * c.o_lora_rank});
    backend_.grouped_matmul(args.out, lw.wo_a, c.o_groups, oa);
    Tensor y = backend_.empty(DType::kF32, {n, D});
    backend_.matmul(oa, lw.wo_b, y);
    backend_.hc_post(st.streams, y, st.post, st.comb);
}

void DeepseekV41Model::source_targets(int l, const StepState& st, SourceInputs& in,
                                      std::vector<kernels::MatmulTarget>& from_x, std::vector<kernels::MatmulTarget>& from_qr) {
    const DeepseekV4Config& c = cfg_.base;
    const V41SourceWeights& sw = w_.sources[l];
    int64_t n = st.n, d = c.head_dim, hi = c.index_n_heads, di = c.index_head_dim;
    if (cfg_.is_kv_source(l) && !st.rebuild_windows) {
        in.comp_kv = backend_.empty(DType::kF32, {n, d});
        from_x.push_back({&sw.comp_wkv, &in.comp_kv});
        if (cfg_.compress_ratios[l] > 1) {
            in.comp_gate = backend_.empty(DType::kF32, {n, d});
            from_x.push_back({&sw.comp_wgate, &in.comp_gate});
        }
    }
    if (cfg_.is_index_source(l)) {
        in.index_weights = backend_.empty(DType::kF32, {n, hi});
        in.index_q = backend_.empty(DType::kF32, {n, hi, di});
        from_x.push_back({&sw.index_weights_proj, &in.index_weights});
        from_qr.push_back({&sw.index_wq_b, &in.index_q});
    }
}

// A KV source compresses the new tokens into entries (pairs pooled at ratio 2, one per token at
// ratio 1) and index keys, and appends both to its pools for this and later layers.
void DeepseekV41Model::publish_source(int l, StepState& st, HybridCache& cache, const SourceInputs& in) {
    const DeepseekV4Config& c = cfg_.base;
    const V41SourceWeights& sw = w_.sources[l];
    HybridCache::LayerState& ls = cache.layer(l);
    int group = cache_layout_.layers[l].group;
    st.entries = kernels::EntryStore{ls.entries, st.step.tables_of(group)};
    st.index_keys = kernels::EntryStore{ls.index_entries, st.step.tables_of(group)};
    if (st.rebuild_windows) return;  // entries, keys and carries of these positions are cached
    int ratio = cfg_.compress_ratios[l];
    int64_t d = c.head_dim, di = c.index_head_dim;

    std::vector<kernels::EntrySlot> slots;  // the entries this step completes, in pooling order
    std::vector<int64_t> entry_pos;         // each entry is roped at its group's first position
    for (size_t s = 0; s < st.seqs.size(); ++s) {
        const kernels::SeqSlice& sl = st.seqs[s];
        int64_t cached = s < st.step.compressed_until.size() ? st.step.compressed_until[s] : 0;
        for (int64_t e = sl.start_pos / ratio; e < (sl.start_pos + sl.num_tokens) / ratio; ++e) {
            // Entries of a shared prefix are cached already: computed again (the pooling order
            // needs the rows) but not stored.
            slots.push_back({static_cast<int32_t>(s), (e + 1) * ratio <= cached ? -1 : e});
            entry_pos.push_back(e * ratio);
        }
    }
    Tensor latent = in.comp_kv;
    int64_t g = static_cast<int64_t>(slots.size());
    if (ratio > 1) {
        kernels::PoolArgs pa;
        pa.kv = in.comp_kv;
        pa.gate = in.comp_gate;
        pa.rate = ratio;
        pa.carry = ls.carry;
        pa.out = latent = backend_.empty(DType::kF32, {g, d});
        backend_.pool_groups(st.seqs, pa);
    }
    if (g == 0) return;
    Tensor positions = upload_i64(entry_pos, backend_);
    backend_.rms_norm(latent, &sw.comp_norm, c.rms_norm_eps, latent);
    Tensor keys = backend_.empty(DType::kF32, {g, di});
    backend_.matmul(latent, sw.index_wk, keys);  // from the pre-RoPE latent
    backend_.rms_norm_rope(keys, &sw.index_k_norm, c.rms_norm_eps, positions, 1, rope_compress_);
    backend_.fake_quantize(keys, QuantFormat::kFp4Ue8m0x32);
    backend_.store_entries(slots, keys, st.index_keys);
    backend_.rope(latent, positions, 1, rope_compress_, false);
    backend_.fake_quantize(latent, QuantFormat::kFp4E4m3x16);
    backend_.store_entries(slots, latent, st.entries);
}

// An index source picks each token's top entries of the latest KV source; the candidate source
// also publishes its top blocks, to which every later index source is restricted.
void DeepseekV41Model::select_entries(int l, StepState& st, SourceInputs& in) {
    const DeepseekV4Config& c = cfg_.base;
    int64_t n = st.n, hi = c.index_n_heads, di = c.index_head_dim;
    kernels::IndexerArgs xa;
    xa.q = in.index_q;
    Tensor q_rows = xa.q.reshape({n * hi, di});
    backend_.rope(q_rows, st.in.positions, static_cast<int>(hi), rope_compress_, false);
    backend_.fake_quantize(xa.q, QuantFormat::kFp4Ue8m0x32);
    xa.weights = in.index_weights;
    xa.scale = 1.0f / std::sqrt(static_cast<float>(hi) * static_cast<float>(di));
    xa.keys = &st.index_keys;
    xa.rate = cfg_.compress_ratios[l];
    xa.top_k = c.index_topk;
    xa.out = backend_.empty(DType::kI32, {n, static_cast<int64_t>(c.index_topk)});
    xa.candidate_block_size = cfg_.candidate_block_size;
    if (l == cfg_.candidate_source_layer_id)
        xa.candidates_out = backend_.empty(DType::kI32, {n, static_cast<int64_t>(cfg_.candidate_topk_blocks)});
    else if (cfg_.uses_candidates(l))
        xa.candidates_in = st.candidates;
    backend_.indexer_topk(st.seqs, xa);
    st.selected = xa.out;
    if (xa.candidates_out.defined()) st.candidates = xa.candidates_out;
}

void DeepseekV41Model::ffn_block(int l, StepState& st) {
    const DeepseekV4Config& c = cfg_.base;
    const V4LayerWeights& lw = w_.core.layers[l];
    int64_t n = st.n, D = c.hidden_size;
    enter_site(lw.ffn_hc, lw.ffn_norm, st);

    Tensor y = backend_.empty(DType::kF32, {n, D});
    moe_feed_forward(backend_, c, lw, false, st.x, st.in.ids, y);
    backend_.hc_post(st.streams, y, st.post, st.comb);
}

}  // namespace deepinfer::model
