// Sliding-window + compressed-entry attention with sinks on the CPU. For each query token the
// keys (window positions from the ring or from this step's new tokens, then the visible or
// selected compressed entries) are listed by row pointer; with AVX-512 both products read them in
// place (attend.h), otherwise they are gathered into one block for the GEMM kernel: scores = Q·Kᵀ
// and out = P·K (through Kᵀ).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/attend.h"
#include "kernels/cpu/cache_rows.h"
#include "kernels/cpu/cpu_backend.h"

namespace deepinfer::kernels::cpu {
namespace {

template <typename Key>
struct Scratch {
    std::vector<float> keys, keys_t, scores, out;
    std::vector<const Key*> rows;
};

inline float key_value(float v) { return v; }
inline float key_value(uint16_t v) { return bf16_to_f32(v); }

// Pointers to the key rows token `t` of `s` attends to, in window-then-compressed order: this
// step's keys `step` [N, d], the ring and the entry pool, all of element type Key.
template <typename Key>
void collect_keys(const SeqSlice& s, int seq_idx, int t, const AttentionArgs& a, const Key* step,
                  std::vector<const Key*>& rows) {
    rows.clear();
    int64_t d = a.kv.dim(1);
    int64_t slots = a.ring.dim(1);
    int64_t pos = s.start_pos + t;
    const Key* ring = a.ring.data<Key>() + static_cast<int64_t>(s.state_idx) * slots * d;
    for (int64_t q = std::max<int64_t>(s.window_from, pos - a.window + 1); q <= pos; ++q) {
        if (q >= s.start_pos)
            rows.push_back(step + (s.token_begin + (q - s.start_pos)) * d);
        else
            rows.push_back(ring + (q % slots) * d);
    }
    if (a.compressed == AttentionArgs::Compressed::kNone) return;
    const EntryStore& st = *a.entries;
    int64_t block = st.pool.dim(1);
    auto entry = [&](int64_t e) {
        return st.pool.data<Key>() + (static_cast<int64_t>(st.tables[seq_idx][e / block]) * block + e % block) * d;
    };
    if (a.compressed == AttentionArgs::Compressed::kAllVisible) {
        for (int64_t e = 0; e < (pos + 1) / a.rate; ++e) rows.push_back(entry(e));
    } else {
        int64_t k = a.selected.dim(1);
        const int32_t* sel = a.selected.data<int32_t>() + (s.token_begin + t) * k;
        for (int64_t i = 0; i < k; ++i)
            if (sel[i] >= 0) rows.push_back(entry(sel[i]));
    }
}

// The key rows copied contiguously (as fp32) and transposed, for the GEMM kernels of other
// instruction sets.
template <typename Key>
void gather_keys(Scratch<Key>& sc, int64_t n, int64_t d) {
    sc.keys.resize(n * d);
    sc.keys_t.resize(d * n);
    for (int64_t j = 0; j < n; ++j)
        for (int64_t c = 0; c < d; ++c) sc.keys_t[c * n + j] = sc.keys[j * d + c] = key_value(sc.rows[j][c]);
}

// Softmax over [scores, sink] per head, the sink only in the denominator.
void softmax_with_sink(float* scores, int64_t num_keys, float sink) {
    float mx = sink;
    for (int64_t j = 0; j < num_keys; ++j) mx = std::max(mx, scores[j]);
    float denom = std::exp(sink - mx);
    for (int64_t j = 0; j < num_keys; ++j) denom += (scores[j] = std::exp(scores[j] - mx));
    float inv = 1.0f / denom;
    for (int64_t j = 0; j < num_keys; ++j) scores[j] *= inv;
}

// Attention of heads [h0, h1) of one query token q [nh, d] over the key rows in sc.rows.
template <typename Key>
void attend_rows(Isa isa, Scratch<Key>& sc, const float* q, int64_t h0, int64_t h1, int64_t d, float scale,
                 const Tensor& sinks, float* out) {
    int64_t n = static_cast<int64_t>(sc.rows.size()), nh = h1 - h0;
    sc.scores.resize(nh * n);
    bool direct = isa == Isa::kAvx512;  // reads the keys in place (attend.h)
    if (direct) {
        attend_scores_avx512(q, nh, d, sc.rows.data(), n, sc.scores.data());
    } else {
        gather_keys(sc, n, d);
        GemmArgs g{.x = q, .lda = d, .w = sc.keys.data(), .ldw = d, .w_dtype = DType::kF32, .y = sc.scores.data(),
                   .ldy = n, .m = nh, .n = n, .k = d};
        gemm_rows(isa, g, 0, n);
    }
    for (int64_t h = 0; h < nh; ++h) {
        float* sh = sc.scores.data() + h * n;
        for (int64_t j = 0; j < n; ++j) sh[j] *= scale;
        softmax_with_sink(sh, n, sinks.data<float>()[h0 + h]);
    }
    if (direct) {
        attend_values_avx512(sc.scores.data(), nh, n, sc.rows.data(), d, out);
    } else {
        GemmArgs o{.x = sc.scores.data(), .lda = n, .w = sc.keys_t.data(), .ldw = n, .w_dtype = DType::kF32,
                   .y = out, .ldy = d, .m = nh, .n = d, .k = n};
        gemm_rows(isa, o, 0, d);
    }
}

// Heads [h0, h1) of one query token.
template <typename Key>
void attend_token(Isa isa, const SeqSlice& s, int seq_idx, int t, int64_t h0, int64_t h1, const AttentionArgs& a,
                  const Key* step) {
    thread_local Scratch<Key> sc;
    int64_t heads = a.q.dim(1), d = a.q.dim(2);
    collect_keys(s, seq_idx, t, a, step, sc.rows);
    int64_t row = s.token_begin + t;
    attend_rows(isa, sc, a.q.data<float>() + (row * heads + h0) * d, h0, h1, d, a.scale, a.sinks,
                a.out.data<float>() + (row * heads + h0) * d);
}

}  // namespace

void CpuBackend::attention(std::span<const SeqSlice> seqs, const AttentionArgs& a) {
    int64_t heads = a.q.dim(1), d = a.q.dim(2);
    DI_CHECK(a.kv.dim(1) == d && a.ring.dim(2) == d, "attention: head dims disagree");
    DI_CHECK(a.ring.dim(1) >= a.window - 1, "attention: ring of {} slots is shorter than the window {}",
             a.ring.dim(1), a.window);
    bool bf16 = a.ring.dtype() == DType::kBF16;
    DI_CHECK(bf16 || a.ring.dtype() == DType::kF32, "attention: ring dtype {}", dtype_name(a.ring.dtype()));
    DI_CHECK(a.compressed == AttentionArgs::Compressed::kNone || a.entries->pool.dtype() == a.ring.dtype(),
             "attention: entries and ring differ in dtype");
    // A bf16 cache: this step's keys as the ring will hold them, so that a key reads the same
    // whether it comes from this step or from the cache (every schedule gives the same bits).
    std::vector<uint16_t> step_bf16(bf16 ? static_cast<size_t>(a.kv.numel()) : 0);
    for (size_t i = 0; i < step_bf16.size(); ++i) step_bf16[i] = f32_to_bf16(a.kv.data<float>()[i]);
    // Work items: (sequence, token, head block); head blocks keep all threads busy in decode.
    struct Item { int seq, token; };
    std::vector<Item> items;
    for (int s = 0; s < static_cast<int>(seqs.size()); ++s)
        for (int t = 0; t < seqs[s].num_tokens; ++t) items.push_back({s, t});
    int64_t head_blocks = std::clamp<int64_t>(2 * pool_.num_threads() / std::max<int64_t>(1, items.size()), 1, heads);
    int64_t heads_per_block = (heads + head_blocks - 1) / head_blocks;
    head_blocks = (heads + heads_per_block - 1) / heads_per_block;
    pool_.run(static_cast<int64_t>(items.size()) * head_blocks, [&](int64_t task) {
        const Item& it = items[task / head_blocks];
        int64_t h0 = (task % head_blocks) * heads_per_block, h1 = std::min(heads, h0 + heads_per_block);
        if (bf16)
            attend_token(isa_, seqs[it.seq], it.seq, it.token, h0, h1, a, step_bf16.data());
        else
            attend_token(isa_, seqs[it.seq], it.seq, it.token, h0, h1, a, a.kv.data<float>());
    });
}

void CpuBackend::block_attention(std::span<const SeqSlice> seqs, const BlockAttentionArgs& a) {
    int64_t heads = a.q.dim(1), d = a.q.dim(2), slots = a.ring.dim(1);
    DI_CHECK(a.ring.dtype() == DType::kF32 && a.kv.dim(1) == d && a.ring.dim(2) == d,
             "block attention: an fp32 ring of the queries' head dim");
    struct Item { int seq, token; };
    std::vector<Item> items;
    for (int s = 0; s < static_cast<int>(seqs.size()); ++s) {
        DI_CHECK(seqs[s].start_pos - seqs[s].window_from <= slots, "block attention: context longer than the ring");
        for (int t = 0; t < seqs[s].num_tokens; ++t) items.push_back({s, t});
    }
    pool_.run(static_cast<int64_t>(items.size()), [&](int64_t task) {
        thread_local Scratch<float> sc;
        const SeqSlice& s = seqs[items[task].seq];
        sc.rows.clear();
        const float* ring = a.ring.data<float>() + static_cast<int64_t>(s.state_idx) * slots * d;
        for (int64_t p = s.window_from; p < s.start_pos; ++p) sc.rows.push_back(ring + (p % slots) * d);
        for (int j = 0; j < s.num_tokens; ++j) sc.rows.push_back(a.kv.data<float>() + (s.token_begin + j) * d);
        int64_t row = s.token_begin + items[task].token;
        attend_rows(isa_, sc, a.q.data<float>() + row * heads * d, 0, heads, d, a.scale, a.sinks,
                    a.out.data<float>() + row * heads * d);
    });
}

void CpuBackend::ring_write(std::span<const SeqSlice> seqs, const Tensor& kv, Tensor& ring) {
    int64_t slots = ring.dim(1), d = ring.dim(2);
    for (const SeqSlice& s : seqs) {
        for (int64_t t = std::max<int64_t>(0, s.num_tokens - slots); t < s.num_tokens; ++t) {
            int64_t slot = (s.start_pos + t) % slots;
            store_row(kv.data<float>() + (s.token_begin + t) * d, d, ring, (static_cast<int64_t>(s.state_idx) * slots + slot) * d);
        }
    }
}

}  // namespace deepinfer::kernels::cpu
