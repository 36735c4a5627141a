#pragma once
// Test adapter: runs a device backend's ops on host tensors. Every input is uploaded, the op runs
// on the device, and every output is downloaded back into the caller's host tensor, so a test
// written for the CPU backend checks a GPU backend unchanged.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace deepinfer::kernels::testing {

class MirrorBackend final : public Backend {
public:
    explicit MirrorBackend(std::unique_ptr<Backend> device) : dev_(std::move(device)) {}

    Device device() const override { return Device::kCpu; }
    const char* name() const override { return dev_->name(); }
    // The device backend's own: its ops run as it is told.
    Execution& execution() override { return dev_->execution(); }
    const Execution& execution() const override { return std::as_const(*dev_).execution(); }
    bool reads_mxfp4() const override { return dev_->reads_mxfp4(); }
    bool reads_fp8() const override { return dev_->reads_fp8(); }
    bool reads_bf16_cache() const override { return dev_->reads_bf16_cache(); }
    Tensor empty(DType dtype, std::vector<int64_t> shape) override { return Tensor::empty(dtype, std::move(shape)); }
    Tensor zeros(DType dtype, std::vector<int64_t> shape) override { return Tensor::zeros(dtype, std::move(shape)); }
    Tensor upload(const Tensor& host) override { return host; }
    void download(const Tensor& src, void* dst) override { std::memcpy(dst, src.raw(), src.nbytes()); }

    void embed(const Tensor& ids, const Tensor& table, int hc, Tensor& out) override {
        Tensor o = up(out);
        dev_->embed(up(ids), up(table), hc, o);
        down(o, out);
    }
    void matmul(const Tensor& x, const Tensor& w, Tensor& y) override {
        Tensor o = up(y);
        dev_->matmul(up(x), up(w), o);
        down(o, y);
    }
    void matmul_many(const Tensor& x, std::span<const MatmulTarget> targets) override {
        std::vector<Tensor> ws, ys;
        for (const auto& t : targets) ws.push_back(up(*t.w)), ys.push_back(up(*t.y));
        std::vector<MatmulTarget> on_device;
        for (size_t i = 0; i < ws.size(); ++i) on_device.push_back({&ws[i], &ys[i]});
        dev_->matmul_many(up(x), on_device);
        for (size_t i = 0; i < ys.size(); ++i) down(ys[i], *targets[i].y);
    }
    void grouped_matmul(const Tensor& x, const Tensor& w, int groups, Tensor& y) override {
        Tensor o = up(y);
        dev_->grouped_matmul(up(x), up(w), groups, o);
        down(o, y);
    }
    void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& y) override {
        Tensor o = up(y), w = weight ? up(*weight) : Tensor();
        dev_->rms_norm(up(x), weight ? &w : nullptr, eps, o);
        down(o, y);
    }
    void rope(Tensor& x, const Tensor& positions, int group, const Rope& rope, bool inverse) override {
        Tensor o = up(x);
        dev_->rope(o, up(positions), group, up(rope), inverse);
        down(o, x);
    }
    void rms_norm_rope(Tensor& x, const Tensor* weight, float eps, const Tensor& positions, int group,
                       const Rope& rope) override {
        Tensor o = up(x), w = weight ? up(*weight) : Tensor();
        dev_->rms_norm_rope(o, weight ? &w : nullptr, eps, up(positions), group, up(rope));
        down(o, x);
    }
    void norm_rope_many(std::span<const NormRopeJob> jobs, const Tensor& positions) override {
        std::vector<Tensor> xs, ws;
        std::vector<Rope> ropes;
        xs.reserve(jobs.size()), ws.reserve(jobs.size()), ropes.reserve(jobs.size());
        std::vector<NormRopeJob> dev_jobs;
        for (const NormRopeJob& j : jobs) {
            NormRopeJob d = j;
            d.x = &xs.emplace_back(up(*j.x));
            if (j.weight) d.weight = &ws.emplace_back(up(*j.weight));
            if (j.rope) d.rope = &ropes.emplace_back(up(*j.rope));
            dev_jobs.push_back(d);
        }
        dev_->norm_rope_many(dev_jobs, up(positions));
        for (size_t i = 0; i < jobs.size(); ++i) down(xs[i], *jobs[i].x);
    }
    void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) override {
        Tensor o = up(out);
        dev_->gather_rows(up(x), up(rows), o);
        down(o, out);
    }
    void add(const Tensor& x, Tensor& y) override {
        Tensor o = up(y);
        dev_->add(up(x), o);
        down(o, y);
    }
    void copy(const Tensor& src, Tensor& dst) override {
        Tensor o = up(dst);
        dev_->copy(up(src), o);
        down(o, dst);
    }
    void argmax_rows(const Tensor& logits, Tensor& ids) override {
        Tensor o = up(ids);
        dev_->argmax_rows(up(logits), o);
        down(o, ids);
    }
    void sample_rows(const SampleArgs& a) override {
        SampleArgs d = a;
        d.logits = up(a.logits);
        d.penalty_state = up_if_defined(a.penalty_state);
        d.tokens = up(a.tokens);
        d.logprobs = up_if_defined(a.logprobs);
        d.top_tokens = up_if_defined(a.top_tokens);
        d.top_logprobs = up_if_defined(a.top_logprobs);
        dev_->sample_rows(d);
        for (auto [dev, host] : {std::pair{&d.penalty_state, &a.penalty_state}, {&d.tokens, &a.tokens}, {&d.logprobs, &a.logprobs},
                                 {&d.top_tokens, &a.top_tokens}, {&d.top_logprobs, &a.top_logprobs}})
            if (host->defined()) down(*dev, *host);
    }
    void reset_penalties(Tensor& state, int32_t slot, std::span<const int32_t> prompt,
                         std::span<const int32_t> output) override {
        Tensor s = up(state);
        dev_->reset_penalties(s, slot, prompt, output);
        down(s, state);
    }
    void apply_token_mask(Tensor& logits, const Tensor& rows, const Tensor& mask) override {
        Tensor o = up(logits);
        dev_->apply_token_mask(o, up(rows), up(mask));
        down(o, logits);
    }
    void swiglu(const Tensor& gate, const Tensor& upv, float limit, Tensor& out) override {
        Tensor o = up(out);
        dev_->swiglu(up(gate), up(upv), limit, o);
        down(o, out);
    }

    void hc_pre(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                Tensor& collapsed, Tensor& post, Tensor& comb) override {
        Tensor c = up(collapsed), po = up(post), cb = up(comb);
        dev_->hc_pre(up(streams), up(fn), up(base), up(scale), p, c, po, cb);
        down(c, collapsed);
        down(po, post);
        down(cb, comb);
    }
    void hc_pre_norm(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                     const Tensor& norm_weight, float eps, Tensor& collapsed, Tensor& post, Tensor& comb) override {
        Tensor c = up(collapsed), po = up(post), cb = up(comb);
        dev_->hc_pre_norm(up(streams), up(fn), up(base), up(scale), p, up(norm_weight), eps, c, po, cb);
        down(c, collapsed);
        down(po, post);
        down(cb, comb);
    }
    void hc_post_pre_norm(Tensor& streams, const Tensor& y, Tensor& post, Tensor& comb, const Tensor& fn, const Tensor& base,
                          const Tensor& scale, const MhcParams& p, const Tensor& norm_weight, float eps,
                          Tensor& collapsed) override {
        Tensor s = up(streams), po = up(post), cb = up(comb), c = up(collapsed);
        dev_->hc_post_pre_norm(s, up(y), po, cb, up(fn), up(base), up(scale), p, up(norm_weight), eps, c);
        down(s, streams);
        down(po, post);
        down(cb, comb);
        down(c, collapsed);
    }
    void hc_post(Tensor& streams, const Tensor& y, const Tensor& post, const Tensor& comb) override {
        Tensor s = up(streams);
        dev_->hc_post(s, up(y), up(post), up(comb));
        down(s, streams);
    }
    void hc_mix(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                Tensor& pre, Tensor& post, Tensor& comb) override {
        Tensor pr = up(pre), po = up(post), cb = up(comb);
        dev_->hc_mix(up(streams), up(fn), up(base), up(scale), p, pr, po, cb);
        down(pr, pre);
        down(po, post);
        down(cb, comb);
    }
    void hc_collapse(const Tensor& streams, const Tensor& pre, Tensor& out) override {
        Tensor o = up(out);
        dev_->hc_collapse(up(streams), up(pre), o);
        down(o, out);
    }
    void engram_gate(Tensor& streams, const Tensor& kv, const Tensor& weight, float eps) override {
        Tensor s = up(streams);
        dev_->engram_gate(s, up(kv), up(weight), eps);
        down(s, streams);
    }
    void hc_head(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale, const MhcParams& p,
                 Tensor& out) override {
        Tensor o = up(out);
        dev_->hc_head(up(streams), up(fn), up(base), up(scale), p, o);
        down(o, out);
    }

    void attention(std::span<const SeqSlice> seqs, const AttentionArgs& args) override {
        AttentionArgs a = args;
        a.q = up(args.q), a.kv = up(args.kv), a.ring = up(args.ring), a.sinks = up(args.sinks), a.out = up(args.out);
        if (args.selected.defined()) a.selected = up(args.selected);
        EntryStore entries = args.entries ? up(*args.entries) : EntryStore{};
        if (args.entries) a.entries = &entries;
        dev_->attention(seqs, a);
        Tensor out = args.out;
        down(a.out, out);
    }
    void block_attention(std::span<const SeqSlice> seqs, const BlockAttentionArgs& args) override {
        BlockAttentionArgs a = args;
        a.q = up(args.q), a.kv = up(args.kv), a.ring = up(args.ring), a.sinks = up(args.sinks), a.out = up(args.out);
        dev_->block_attention(seqs, a);
        Tensor out = args.out;
        down(a.out, out);
    }
    void attend_and_store(std::span<const SeqSlice> seqs, const AttentionArgs& args, const Tensor& positions,
                          const Rope& out_rope, const QueryPrep& q_prep) override {
        AttentionArgs a = args;
        a.q = up(args.q), a.kv = up(args.kv), a.ring = up(args.ring), a.sinks = up(args.sinks), a.out = up(args.out);
        if (args.selected.defined()) a.selected = up(args.selected);
        EntryStore entries = args.entries ? up(*args.entries) : EntryStore{};
        if (args.entries) a.entries = &entries;
        Rope q_rope = q_prep.rope ? up(*q_prep.rope) : Rope{};
        QueryPrep prep = q_prep;
        if (q_prep.rope) prep.rope = &q_rope;
        dev_->attend_and_store(seqs, a, up(positions), up(out_rope), prep);
        down(a.out, args.out);
        down(a.ring, args.ring);
    }
    void ring_write(std::span<const SeqSlice> seqs, const Tensor& kv, Tensor& ring) override {
        Tensor r = up(ring);
        dev_->ring_write(seqs, up(kv), r);
        down(r, ring);
    }
    void compressor_update(std::span<const SeqSlice> seqs, const CompressorArgs& args) override {
        CompressorArgs a = args;
        a.kv = up(args.kv), a.gate = up(args.gate), a.ape = up(args.ape), a.norm = up(args.norm);
        a.rope = up(args.rope), a.carry = up(args.carry);
        EntryStore out = up(*args.out);
        a.out = &out;
        dev_->compressor_update(seqs, a);
        Tensor carry = args.carry;
        down(a.carry, carry);
        down(out.pool, args.out->pool);
    }
    void indexer_topk(std::span<const SeqSlice> seqs, const IndexerArgs& args) override {
        IndexerArgs a = args;
        a.q = up(args.q), a.weights = up(args.weights), a.out = up(args.out);
        if (args.candidates_in.defined()) a.candidates_in = up(args.candidates_in);
        if (args.candidates_out.defined()) a.candidates_out = up(args.candidates_out);
        EntryStore keys = up(*args.keys);
        a.keys = &keys;
        dev_->indexer_topk(seqs, a);
        Tensor out = args.out;
        down(a.out, out);
        if (args.candidates_out.defined()) down(a.candidates_out, args.candidates_out);
    }
    void pool_groups(std::span<const SeqSlice> seqs, const PoolArgs& args) override {
        PoolArgs a = args;
        a.kv = up(args.kv), a.gate = up(args.gate), a.carry = up(args.carry), a.out = up(args.out);
        dev_->pool_groups(seqs, a);
        down(a.carry, args.carry);
        down(a.out, args.out);
    }
    void store_entries(std::span<const EntrySlot> slots, const Tensor& rows, const EntryStore& store) override {
        EntryStore s = up(store);
        dev_->store_entries(slots, up(rows), s);
        down(s.pool, store.pool);
    }
    void fake_quantize(Tensor& x, QuantFormat format) override {
        Tensor o = up(x);
        dev_->fake_quantize(o, format);
        down(o, x);
    }

    void moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids, int top_k,
                   float scaling, Tensor& ids, Tensor& weights) override {
        Tensor b = bias ? up(*bias) : Tensor(), t = tid2eid ? up(*tid2eid) : Tensor();
        Tensor tok = token_ids ? up(*token_ids) : Tensor(), i = up(ids), w = up(weights);
        dev_->moe_route(up(logits), bias ? &b : nullptr, tid2eid ? &t : nullptr, token_ids ? &tok : nullptr, top_k,
                        scaling, i, w);
        down(i, ids);
        down(w, weights);
    }
    void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                     float limit, Tensor& out) override {
        std::vector<ExpertWeights> dev_experts;
        for (const auto& e : experts) dev_experts.push_back({up(e.w1), up(e.w3), up(e.w2)});
        Tensor o = up(out);
        dev_->moe_experts(up(x), up(ids), up(weights), dev_experts, limit, o);
        down(o, out);
    }
    void moe_ffn(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                 const ExpertWeights& shared, float limit, Tensor& out) override {
        std::vector<ExpertWeights> dev_experts;
        for (const auto& e : experts) dev_experts.push_back({up(e.w1), up(e.w3), up(e.w2)});
        Tensor o = up(out);
        dev_->moe_ffn(up(x), up(ids), up(weights), dev_experts, {up(shared.w1), up(shared.w3), up(shared.w2)}, limit, o);
        down(o, out);
    }

private:
    Tensor up(const Tensor& host) { return dev_->upload(host); }
    Rope up(const Rope& r) { return {up(r.inv_freq), r.rope_dim, r.scale}; }
    EntryStore up(const EntryStore& s) { return {up(s.pool), s.tables}; }
    Tensor up_if_defined(const Tensor& host) { return host.defined() ? up(host) : Tensor(); }
    void down(const Tensor& dev, const Tensor& host) { dev_->download(dev, host.raw()); }

    std::unique_ptr<Backend> dev_;
};

// The CUDA backend behind a mirror (host tensors in and out), or null with the reason in `why`
// when there is no device (the tests skip then).
inline std::unique_ptr<Backend> mirrored_cuda_backend(std::string& why) {
    try {
        return std::make_unique<MirrorBackend>(make_cuda_backend(0));
    } catch (const Error& e) {
        why = e.what();
        return nullptr;
    }
}

}  // namespace deepinfer::kernels::testing
