#pragma once
// The op interface the model layers are written against. One implementation per device (CPU now;
// CUDA behind the same interface), chosen at run time. How they run (precision, graphs,
// profiling, kernel choices) is the backend's Execution (execution.h), not part of any op. Ops
// take Tensors that live on the backend's device; shapes are in the comments as [rows, cols].
// Activations are fp32; weights are bf16 or fp32 (matmul), other parameters fp32.
//
// Per-sequence cached state (sliding-window rings, compressor carries, compressed-entry blocks)
// is memory owned by the caller and described by the structs below; the ops read and append to
// it. All positions are absolute token positions within a sequence.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/execution.h"

namespace deepinfer::kernels {

// One sequence's share of a flat batch of new tokens.
struct SeqSlice {
    int32_t token_begin = 0;  // first row of this sequence in the flat batch
    int32_t num_tokens = 0;   // new tokens this step
    int64_t start_pos = 0;    // position of the first new token (= tokens already cached)
    int32_t state_idx = 0;    // row of this sequence in the per-sequence state tensors
    // Positions below this are outside the sliding window even when within `window` (bounded
    // replay: a layer that skipped them never wrote them to its ring).
    int64_t window_from = 0;
};

// Append-only per-sequence entries (compressed KV, indexer keys) in fixed-size blocks of a pool.
struct EntryStore {
    Tensor pool;  // [num_blocks, block_size, dim] fp32
    // Per sequence (parallel to the SeqSlice list): block ids; entry e lives in block
    // tables[s][e / block_size] at row e % block_size. The caller allocates blocks in advance
    // for every entry a step can append.
    std::vector<std::span<const int32_t>> tables;
};

// Interleaved RoPE on the trailing `rope_dim` channels: pair i = channels (2i, 2i+1) of the slice,
// angle = position * inv_freq[i].
struct Rope {
    Tensor inv_freq;  // [rope_dim / 2] fp32
    int rope_dim = 0;
    float scale = 1.0f;  // multiplies cos and sin (YaRN attention factor)
};

struct MhcParams {
    int hc = 4;
    int sinkhorn_iters = 20;
    float hc_eps = 1e-6f;
    float norm_eps = 1e-6f;
};

// Sliding-window + compressed-entry attention with per-head sinks (DeepSeek-V4 shared K=V head).
struct AttentionArgs {
    Tensor q;        // [N, H, d], roped
    Tensor kv;       // [N, d], roped keys (= values) of the new tokens
    Tensor ring;     // [num_states, ring_slots, d]: position p at slot p % ring_slots
    int window = 0;  // a token at p sees window positions (p - window, p]
    enum class Compressed { kNone, kAllVisible, kSelected } compressed = Compressed::kNone;
    const EntryStore* entries = nullptr;  // compressed entries (kAllVisible / kSelected)
    int rate = 1;                         // kAllVisible: a token at p sees entries [0, (p + 1) / rate)
    Tensor selected;                      // kSelected: [N, k] int32 entry ids; -1 = none, only after the valid ones
    Tensor sinks;                         // [H]
    float scale = 1.0f;
    Tensor out;  // [N, H, d]
};

// DSpark draft attention. Each slice is one draft block: its queries (positions start_pos ..)
// see the ring's positions [window_from, start_pos) - keys of committed tokens - and every key
// of their own block, whatever its position (no causal mask inside the block), with per-head sinks.
struct BlockAttentionArgs {
    Tensor q;      // [N, H, d], roped
    Tensor kv;     // [N, d], roped keys (= values) of the block tokens
    Tensor ring;   // [num_states, ring_slots, d] fp32: position p at slot p % ring_slots
    Tensor sinks;  // [H]
    float scale = 1.0f;
    Tensor out;    // [N, H, d]
};

// Softmax-gated pooling of windows of `rate` tokens into entries (DeepSeek-V4 HCA / CSA compressor).
struct CompressorArgs {
    Tensor kv;       // [N, c * dim] projections of the new tokens (c = 2 with overlap, else 1)
    Tensor gate;     // [N, c * dim]
    Tensor ape;      // [rate, c * dim] position bias added to the gate
    Tensor norm;     // [dim] RMSNorm weight applied to each pooled entry
    float norm_eps = 1e-6f;
    Rope rope;       // applied to each entry at position entry_idx * rate
    int rate = 4;
    int dim = 0;
    bool overlap = false;  // CSA: entry w pools window w-1's first half with window w's second half
    Tensor carry;          // [num_states, (overlap ? 2 : 1) * rate, 2 * c * dim]: raw kv | gate of recent tokens
    EntryStore* out = nullptr;
};

// Softmax-gated pooling of non-overlapping groups of `rate` tokens (the DeepSeek-V4.1
// compressor): out[c] = Σ_j kv[j][c] · softmax_j(gate[j][c]) over a group's tokens. Rows of `out`
// are the groups that complete in this step, sequence by sequence in order; the tokens of a
// group still filling wait in the carry (slot p % rate of the sequence's state row).
struct PoolArgs {
    Tensor kv, gate;  // [N, dim]
    int rate = 2;
    Tensor carry;     // [num_states, rate, 2 * dim]: kv | gate
    Tensor out;       // [groups, dim]
};

// One row of an entry pool: the sequence (index into the store's tables) and its entry number
// (-1: the row is not stored).
struct EntrySlot {
    int32_t seq = 0;
    int64_t entry = 0;
};

// Fake quantisation the DeepSeek-V4.1 checkpoints were trained with: each block of the last
// dimension is scaled, rounded to nearest-even on the format's grid and scaled back. A last
// dimension that is not a multiple of the block passes through unchanged.
enum class QuantFormat {
    kFp8Ue8m0x32,  // float8 e4m3, power-of-two scale per 32 channels (sliding-window KV)
    kFp4E4m3x16,   // float4 e2m1, e4m3 scale per 16 channels (compressed KV entries)
    kFp4Ue8m0x32,  // float4 e2m1, power-of-two scale per 32 channels (indexer queries and keys)
};

// Lightning-indexer selection: per token the top-k visible entries by Σ_h w_h · relu(q_h · k).
struct IndexerArgs {
    Tensor q;        // [N, heads, dim], roped
    Tensor weights;  // [N, heads]
    float scale = 1.0f;  // multiplies every score (HF: heads^-0.5 on the weights, dim^-0.5 on q·k)
    const EntryStore* keys = nullptr;
    int rate = 4;    // a token at p sees entries [0, (p + 1) / rate)
    int top_k = 0;
    Tensor out;      // [N, top_k] int32, -1 padded; ties go to the lower entry id
    // Two-level selection (V4.1). candidates_in [N, c] int32 block ids (-1 padded): only entries in
    // these blocks compete. candidates_out [N, c]: the top c blocks of candidate_block_size
    // entries by their best visible entry, the block of the newest visible entry always kept.
    int candidate_block_size = 0;
    Tensor candidates_in, candidates_out;
};

// One product of Backend::matmul_many: y = x · wᵀ.
struct MatmulTarget {
    const Tensor* w;
    Tensor* y;
};

// One in-place row job of norm_rope_many: rms_norm (when `norm`, weight optional), then forward
// rope (when `rope` is set) with rows r*group .. r*group+group-1 at positions[r].
struct NormRopeJob {
    Tensor* x;  // [R, C]
    bool norm = true;
    const Tensor* weight = nullptr;
    float eps = 1e-6f;
    const Rope* rope = nullptr;
    int group = 1;
};

// What attend_and_store does to the query heads before attending (see there).
struct QueryPrep {
    bool norm = false;
    float eps = 1e-6f;
    const Rope* rope = nullptr;
};

// Routed experts of one MoE layer: expert e uses rows of w1/w3 [inter, D] and w2 [D, inter].
struct ExpertWeights {
    Tensor w1, w3, w2;
};

// A contiguous region of a device tensor and host memory of its size (Backend::transfer_*).
struct HostTransfer {
    Tensor device;
    std::byte* host = nullptr;
};

// One row of Backend::sample_rows: how its token is chosen. The definition (the order of the
// steps and their arithmetic) is stated in runtime/sampler.h; kernels/sampling_math.h holds the
// arithmetic every backend shares.
struct SampleRow {
    float temperature = 1.0f;  // <= 0: greedy
    int32_t top_k = 0;         // 0 (or >= vocab): off; 1: greedy
    float top_p = 1.0f;        // >= 1: off
    float min_p = 0.0f;        // <= 0: off
    float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
    // Row of the penalty state with this sequence's history; -1: none (no penalties read, the
    // chosen token not recorded).
    int32_t penalty_slot = -1;
    uint64_t seed = 0;
    int64_t position = 0;     // of the token being chosen (the draw's counter)
    int32_t bias_begin = 0;   // this row's entries of SampleArgs::bias
    int32_t bias_count = 0;
    int32_t logprobs = -1;    // -1: none; 0: the chosen token's; N: also the top N (raw log-softmax)
};

struct LogitBias {
    int32_t token = 0;
    float bias = 0.0f;
};

// What Backend::sample_rows reads and writes. The rows' parameters and biases are host memory
// (the step's metadata); tensors live on the backend's device.
struct SampleArgs {
    Tensor logits;                    // [rows, vocab] fp32
    std::span<const SampleRow> rows;  // one per logits row
    std::span<const LogitBias> bias;  // at most one entry per (row, token)
    // [slots, vocab] int32 penalty words (kernels/sampling_math.h); needed when a row has a slot.
    Tensor penalty_state;
    Tensor tokens;                    // out [rows] int32
    Tensor logprobs;                  // out [rows] fp32; needed when a row asks for logprobs
    // out [rows, top] int32 / fp32, best first: the top N of rows asking for N > 0 (N <= top).
    Tensor top_tokens, top_logprobs;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual Device device() const = 0;
    virtual const char* name() const = 0;
    // How the ops run (precision, deterministic mode, profiling, graphs, kernel choices).
    virtual Execution& execution() = 0;
    virtual const Execution& execution() const = 0;
    // Whether matmul and the MoE ops take MXFP4 weights as stored (DType::kMxfp4, core/quant_mxfp4.h);
    // the model widens them to bf16 at load where not.
    virtual bool reads_mxfp4() const { return false; }
    // The same for FP8 block-scaled weights (DType::kFp8, core/quant_fp8.h) in matmul.
    virtual bool reads_fp8() const { return false; }
    // Whether the cache ops (ring_write, attention, store_entries, indexer_topk) take bf16 rings
    // and entry pools: values rounded to bf16 (nearest even) where they are stored, and the step's
    // own keys rounded the same way where attention reads them, so that every schedule reads the
    // same keys.
    virtual bool reads_bf16_cache() const { return false; }

    // --- memory -------------------------------------------------------------------------------
    virtual Tensor empty(DType dtype, std::vector<int64_t> shape) = 0;
    virtual Tensor zeros(DType dtype, std::vector<int64_t> shape) = 0;
    // A device copy of a host tensor (may alias it when the device is the host).
    virtual Tensor upload(const Tensor& host) = 0;
    virtual void download(const Tensor& src, void* host_dst) = 0;
    // Host memory for transfers (page-locked on a GPU, so its copies run asynchronously).
    virtual Tensor host_buffer(int64_t bytes) { return Tensor::empty(DType::kU8, {bytes}); }
    // Copies on the backend's transfer queue (a side stream on a GPU, so they overlap compute),
    // ordered after the work queued so far; work queued later waits for them. The host side of
    // transfer_to_host is complete, and host memory given to transfer_to_device may change again,
    // once sync_transfers() returns. Here the device is the host: plain copies.
    virtual void transfer_to_host(std::span<const HostTransfer> copies);
    virtual void transfer_to_device(std::span<const HostTransfer> copies);
    virtual void sync_transfers() {}

    // --- dense ops ----------------------------------------------------------------------------
    // out[N, hc, D] = table[ids] repeated over hc streams (table bf16 or fp32 [V, D]).
    virtual void embed(const Tensor& ids, const Tensor& table, int hc, Tensor& out) = 0;
    // y[M, N] = x[M, K] · wᵀ, w [N, K] bf16 or fp32.
    virtual void matmul(const Tensor& x, const Tensor& w, Tensor& y) = 0;
    // y_i = x · w_iᵀ for sibling projections of the same x; a device backend may run them as one
    // launch (decode steps are launch-bound).
    virtual void matmul_many(const Tensor& x, std::span<const MatmulTarget> targets) {
        for (const auto& t : targets) matmul(x, *t.w, *t.y);
    }
    // Block-diagonal: y[:, g*R:(g+1)*R] = x[:, g*K:(g+1)*K] · w[g*R:(g+1)*R, :]ᵀ.
    virtual void grouped_matmul(const Tensor& x, const Tensor& w, int groups, Tensor& y) = 0;
    // y[r, :] = x[r, :] / rms(x[r, :]) (* weight); x [R, C]; in place allowed.
    virtual void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& y) = 0;
    // In place on x [R, C]: rows r*group .. r*group+group-1 use position positions[r].
    virtual void rope(Tensor& x, const Tensor& positions, int group, const Rope& rope, bool inverse) = 0;
    // In place: rms_norm(x, weight, eps), then forward rope (one pass on a device backend).
    virtual void rms_norm_rope(Tensor& x, const Tensor* weight, float eps, const Tensor& positions, int group,
                               const Rope& r) {
        rms_norm(x, weight, eps, x);
        rope(x, positions, group, r, false);
    }
    // Independent norm / rope jobs on different tensors, one launch on a device backend.
    virtual void norm_rope_many(std::span<const NormRopeJob> jobs, const Tensor& positions) {
        for (const NormRopeJob& j : jobs) {
            if (j.norm && j.rope != nullptr)
                rms_norm_rope(*j.x, j.weight, j.eps, positions, j.group, *j.rope);
            else if (j.norm)
                rms_norm(*j.x, j.weight, j.eps, *j.x);
            else if (j.rope != nullptr)
                rope(*j.x, positions, j.group, *j.rope, false);
        }
    }
    // out[i, :] = x[rows[i], :].
    virtual void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) = 0;
    // y += x (same shape).
    virtual void add(const Tensor& x, Tensor& y) = 0;
    // dst = src, byte for byte (same size; any dtype).
    virtual void copy(const Tensor& src, Tensor& dst) = 0;
    // ids[r] (int32) = the index of row r's largest logit, ties to the lower index: greedy
    // sampling where the logits are, so a greedy step brings back an id per row, not the rows.
    virtual void argmax_rows(const Tensor& logits, Tensor& ids) = 0;
    // One token per row of args.logits, chosen as runtime/sampler.h defines (the same token on
    // every backend for the same inputs); each row with a penalty slot counts its token there.
    virtual void sample_rows(const SampleArgs& args) = 0;
    // Sets row `slot` of a penalty state [slots, vocab] to one sequence's history: its prompt
    // tokens flagged, its output tokens counted.
    virtual void reset_penalties(Tensor& state, int32_t slot, std::span<const int32_t> prompt,
                                 std::span<const int32_t> output) = 0;
    // Structured output, before sampling or argmax_rows: logits[rows[i], v] = -inf wherever bit
    // v % 32 of mask[i, v / 32] is clear. logits [R, V] fp32, rows [M] int32, mask [M, ceil(V / 32)]
    // int32 (bit patterns).
    virtual void apply_token_mask(Tensor& logits, const Tensor& rows, const Tensor& mask) = 0;
    // Blocks until the work queued so far has finished (a device's queue; the CPU runs ops at once).
    virtual void synchronize() {}
    // out[M, I] = silu(min(gate, limit)) * clamp(up, -limit, limit).
    virtual void swiglu(const Tensor& gate, const Tensor& up, float limit, Tensor& out) = 0;

    // --- mHC ------------------------------------------------------------------------------------
    // streams [N, hc, D]; fn [(2+hc)*hc, hc*D]; base [(2+hc)*hc]; scale [3] ->
    // collapsed [N, D], post [N, hc], comb [N, hc, hc] (Sinkhorn-normalised).
    virtual void hc_pre(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                        const MhcParams& p, Tensor& collapsed, Tensor& post, Tensor& comb) = 0;
    // hc_pre, then rms_norm(collapsed, norm_weight, eps) (one pass on a device backend).
    virtual void hc_pre_norm(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                             const MhcParams& p, const Tensor& norm_weight, float eps, Tensor& collapsed, Tensor& post,
                             Tensor& comb) {
        hc_pre(streams, fn, base, scale, p, collapsed, post, comb);
        rms_norm(collapsed, &norm_weight, eps, collapsed);
    }
    // hc_post(streams, y, post, comb), then hc_pre_norm of the updated streams for the next mHC
    // site (its fn/base/scale/norm), writing collapsed and a new post/comb (which may be the same
    // tensors as the inputs). A device backend fuses the update with the next site's products.
    virtual void hc_post_pre_norm(Tensor& streams, const Tensor& y, Tensor& post, Tensor& comb, const Tensor& fn,
                                  const Tensor& base, const Tensor& scale, const MhcParams& p, const Tensor& norm_weight,
                                  float eps, Tensor& collapsed) {
        hc_post(streams, y, post, comb);
        hc_pre_norm(streams, fn, base, scale, p, norm_weight, eps, collapsed, post, comb);
    }
    // streams[k] = post[k] * y + Σ_j comb[j, k] * streams[j], in place.
    virtual void hc_post(Tensor& streams, const Tensor& y, const Tensor& post, const Tensor& comb) = 0;
    // hc_pre's coefficients without the collapse: pre [N, hc], post, comb (delayed mHC of V4.1,
    // where a site's `pre` collapses the streams at the next site).
    virtual void hc_mix(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                        const MhcParams& p, Tensor& pre, Tensor& post, Tensor& comb) = 0;
    // out[N, D] = Σ_j pre[N, j] * streams[N, j, D].
    virtual void hc_collapse(const Tensor& streams, const Tensor& pre, Tensor& out) = 0;
    // Engram (DeepSeek-V4.1), in place on streams [N, hc, D] with kv [N, (hc + 1) * D] = hc keys
    // then one value: streams[n, j] += g * value[n], g = sigmoid(signed sqrt(max(|t|, 1e-6))),
    // t = Σ_d streams·weight[j]·key[j] / (rms(streams[n, j]) rms(key[j]) sqrt(D)), rms with eps.
    virtual void engram_gate(Tensor& streams, const Tensor& kv, const Tensor& weight, float eps) = 0;
    // out[N, D] = Σ_j (sigmoid(rms(flat) · fnᵀ * scale + base) + eps)_j * streams[j].
    virtual void hc_head(const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
                         const MhcParams& p, Tensor& out) = 0;

    // --- attention and cached state -------------------------------------------------------------
    virtual void attention(std::span<const SeqSlice> seqs, const AttentionArgs& args) = 0;
    // DSpark draft blocks (BlockAttentionArgs).
    virtual void block_attention(std::span<const SeqSlice> seqs, const BlockAttentionArgs& args) = 0;
    // Stores the new tokens' kv into the rings (the last ring_slots of them per sequence).
    virtual void ring_write(std::span<const SeqSlice> seqs, const Tensor& kv, Tensor& ring) = 0;
    // The query heads' preparation (rms_norm without weight when `norm`, then forward rope when
    // `rope` is set), then attention(args), ring_write(args.kv into args.ring), then the inverse
    // rope of args.out (group = heads) at `positions`. A device backend may apply the preparation
    // to the queries as the attention loads them (args.q is then left unprepared) and fold the
    // ring store and the output rope into the attention's last pass.
    virtual void attend_and_store(std::span<const SeqSlice> seqs, const AttentionArgs& args, const Tensor& positions,
                                  const Rope& out_rope, const QueryPrep& q_prep = {}) {
        if (q_prep.norm || q_prep.rope != nullptr) {
            Tensor q = args.q.reshape({args.q.dim(0) * args.q.dim(1), args.q.dim(2)});
            NormRopeJob job{&q, q_prep.norm, nullptr, q_prep.eps, q_prep.rope, static_cast<int>(args.q.dim(1))};
            norm_rope_many({&job, 1}, positions);
        }
        attention(seqs, args);
        Tensor ring = args.ring, o = args.out.reshape({args.out.dim(0) * args.out.dim(1), args.out.dim(2)});
        ring_write(seqs, args.kv, ring);
        rope(o, positions, static_cast<int>(args.out.dim(1)), out_rope, true);
    }
    virtual void compressor_update(std::span<const SeqSlice> seqs, const CompressorArgs& args) = 0;
    virtual void indexer_topk(std::span<const SeqSlice> seqs, const IndexerArgs& args) = 0;
    virtual void pool_groups(std::span<const SeqSlice> seqs, const PoolArgs& args) = 0;
    // store.pool row of slots[i] = rows[i].
    virtual void store_entries(std::span<const EntrySlot> slots, const Tensor& rows, const EntryStore& store) = 0;
    // In place on x [..., C].
    virtual void fake_quantize(Tensor& x, QuantFormat format) = 0;

    // --- MoE ------------------------------------------------------------------------------------
    // scores = sqrt(softplus(logits)); ids = top-k of scores + bias, or tid2eid[token_ids] when
    // tid2eid is defined; weights = scores[ids] / Σ * scaling.
    virtual void moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids,
                           int top_k, float scaling, Tensor& ids, Tensor& weights) = 0;
    // out[N, D] += Σ_i weights[n, i] * expert_{ids[n, i]}(x[n]) with clamped SwiGLU experts.
    virtual void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                             std::span<const ExpertWeights> experts, float limit, Tensor& out) = 0;
    // The MoE feed-forward with its shared expert: out[N, D] = shared(x) + the routed sum above
    // (out is overwritten); a device backend may run the shared expert as one more slot per token.
    virtual void moe_ffn(const Tensor& x, const Tensor& ids, const Tensor& weights, std::span<const ExpertWeights> experts,
                         const ExpertWeights& shared, float limit, Tensor& out) {
        int64_t n = x.dim(0), inter = shared.w1.dim(0);
        Tensor gate = empty(DType::kF32, {n, inter}), up = empty(DType::kF32, {n, inter});
        MatmulTarget from_x[] = {{&shared.w1, &gate}, {&shared.w3, &up}};
        matmul_many(x, from_x);
        swiglu(gate, up, limit, gate);
        matmul(gate, shared.w2, out);
        moe_experts(x, ids, weights, experts, limit, out);
    }
};

// The CPU backend; num_threads 0 = all hardware threads.
std::unique_ptr<Backend> make_cpu_backend(int num_threads = 0);
// "cpu", "cuda" or "cuda:N"; throws deepinfer::Error for an unknown or unavailable device.
std::unique_ptr<Backend> make_backend(const std::string& device, int num_threads = 0);

}  // namespace deepinfer::kernels
