// Compressors (softmax-gated window pooling into entries) and the lightning indexer on the CPU.
//
// The compressor keeps the raw kv|gate projections of the most recent tokens in a per-sequence
// carry ring: at least `rate` slots, or 2*rate with overlap so that the previous window's
// first-half series (Ca) is still there when the current window closes; position p lives in slot
// p % slots, and slots beyond that minimum keep the rows a rolled-back step overwrote (speculative
// drafts). Window w covers positions [w*rate, (w+1)*rate) and closes at its last token, appending
// entry w.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/cache_rows.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/math.h"

namespace deepinfer::kernels::cpu {
namespace {

// Element offset of entry e of sequence seq_idx in the store's pool.
int64_t entry_at(const EntryStore& st, int seq_idx, int64_t e) {
    int64_t block = st.pool.dim(1), dim = st.pool.dim(2);
    DI_CHECK(e / block < static_cast<int64_t>(st.tables[seq_idx].size()),
             "entry store: no block allocated for entry {}", e);
    return (static_cast<int64_t>(st.tables[seq_idx][e / block]) * block + e % block) * dim;
}

// Pools window `w` of one sequence into `out` [dim] (before norm and rope).
void pool_window(const CompressorArgs& a, const float* carry, int64_t w, float* out) {
    const int rate = a.rate, dim = a.dim;
    const int c = a.overlap ? 2 : 1;
    const int64_t slots = a.carry.dim(1), width = 2 * c * dim;
    const float* ape = a.ape.data<float>();
    std::vector<float> logit(2 * rate), value(2 * rate);
    for (int ch = 0; ch < dim; ++ch) {
        int n = 0;
        if (a.overlap) {  // first half: window w-1's Ca series (absent for w = 0)
            for (int j = 0; j < rate; ++j, ++n) {
                if (w == 0) {
                    logit[n] = -std::numeric_limits<float>::infinity();
                    value[n] = 0.0f;
                    continue;
                }
                const float* tok = carry + (((w - 1) * rate + j) % slots) * width;
                value[n] = tok[ch];
                logit[n] = tok[c * dim + ch] + ape[j * c * dim + ch];
            }
        }
        int off = a.overlap ? dim : 0;  // current window: the Cb series with overlap, else the only one
        for (int j = 0; j < rate; ++j, ++n) {
            const float* tok = carry + ((w * rate + j) % slots) * width;
            value[n] = tok[off + ch];
            logit[n] = tok[c * dim + off + ch] + ape[j * c * dim + off + ch];
        }
        float mx = *std::max_element(logit.begin(), logit.begin() + n);
        float sum = 0.0f, acc = 0.0f;
        for (int j = 0; j < n; ++j) {
            float e = std::exp(logit[j] - mx);
            sum += e;
            acc += e * value[j];
        }
        out[ch] = acc / sum;
    }
}

void finish_entry(const CompressorArgs& a, int64_t w, float* entry) {
    double ss = 0.0;
    for (int ch = 0; ch < a.dim; ++ch) ss += static_cast<double>(entry[ch]) * entry[ch];
    float inv = 1.0f / std::sqrt(static_cast<float>(ss / a.dim) + a.norm_eps);
    const float* nw = a.norm.data<float>();
    for (int ch = 0; ch < a.dim; ++ch) entry[ch] = nw[ch] * (entry[ch] * inv);
    rope_row(entry, a.dim, w * a.rate, a.rope.inv_freq.data<float>(), a.rope.rope_dim, a.rope.scale, false);
}

}  // namespace

void CpuBackend::compressor_update(std::span<const SeqSlice> seqs, const CompressorArgs& a) {
    const int c = a.overlap ? 2 : 1;
    const int64_t slots = a.carry.dim(1), width = 2 * c * a.dim;
    DI_CHECK(a.kv.dim(1) == c * a.dim && slots >= c * a.rate && a.carry.dim(2) == width,
             "compressor: kv {} / carry {} do not match dim={} rate={}", a.kv.shape_string(), a.carry.shape_string(),
             a.dim, a.rate);
    pool_.run(static_cast<int64_t>(seqs.size()), [&](int64_t si) {
        const SeqSlice& s = seqs[si];
        float* carry = a.carry.data<float>() + static_cast<int64_t>(s.state_idx) * slots * width;
        for (int t = 0; t < s.num_tokens; ++t) {
            int64_t pos = s.start_pos + t, row = s.token_begin + t;
            float* slot = carry + (pos % slots) * width;
            std::memcpy(slot, a.kv.data<float>() + row * c * a.dim, c * a.dim * sizeof(float));
            std::memcpy(slot + c * a.dim, a.gate.data<float>() + row * c * a.dim, c * a.dim * sizeof(float));
            if ((pos + 1) % a.rate != 0) continue;
            int64_t w = pos / a.rate;
            thread_local std::vector<float> entry;
            entry.resize(a.dim);
            pool_window(a, carry, w, entry.data());
            finish_entry(a, w, entry.data());
            store_row(entry.data(), a.dim, a.out->pool, entry_at(*a.out, static_cast<int>(si), w));
        }
    });
}

namespace {

// Writes the `k` best of `ids` by score (ties to the lower id) to out, -1 padded.
void write_top(std::vector<int32_t>& ids, const float* score, int64_t k, int32_t* out) {
    int64_t keep = std::min<int64_t>(k, static_cast<int64_t>(ids.size()));
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), [&](int32_t x, int32_t y) {
        return score[x] > score[y] || (score[x] == score[y] && x < y);
    });
    for (int64_t i = 0; i < k; ++i) out[i] = i < keep ? ids[i] : -1;
}

// The entries a token's selection ranks: all visible ones, or those inside its candidate blocks.
void competing_entries(const IndexerArgs& a, int64_t row, int64_t visible, std::vector<int32_t>& ids) {
    ids.clear();
    if (!a.candidates_in.defined()) {
        ids.resize(visible);
        std::iota(ids.begin(), ids.end(), 0);
        return;
    }
    int64_t c = a.candidates_in.dim(1), bs = a.candidate_block_size;
    const int32_t* blocks = a.candidates_in.data<int32_t>() + row * c;
    for (int64_t i = 0; i < c; ++i) {
        if (blocks[i] < 0) continue;
        for (int64_t e = blocks[i] * bs; e < std::min(visible, (blocks[i] + 1) * bs); ++e) ids.push_back(static_cast<int32_t>(e));
    }
}

// Candidate blocks of one token: best entry per block, the newest visible block pinned.
void pick_candidate_blocks(const IndexerArgs& a, int64_t row, int64_t visible, const std::vector<float>& score) {
    int64_t bs = a.candidate_block_size, c = a.candidates_out.dim(1), nb = (visible + bs - 1) / bs;
    thread_local std::vector<float> best;
    thread_local std::vector<int32_t> ids;
    best.assign(nb, -std::numeric_limits<float>::infinity());
    for (int64_t e = 0; e < visible; ++e) best[e / bs] = std::max(best[e / bs], score[e]);
    if (nb > 0) best[nb - 1] = std::numeric_limits<float>::infinity();
    ids.resize(nb);
    std::iota(ids.begin(), ids.end(), 0);
    write_top(ids, best.data(), c, a.candidates_out.data<int32_t>() + row * c);
}

}  // namespace

void CpuBackend::indexer_topk(std::span<const SeqSlice> seqs, const IndexerArgs& a) {
    int64_t heads = a.q.dim(1), dim = a.q.dim(2), k = a.top_k;
    DI_CHECK(a.out.dim(1) == k, "indexer: output {} does not hold top_k={}", a.out.shape_string(), k);
    DI_CHECK(a.candidate_block_size > 0 || (!a.candidates_in.defined() && !a.candidates_out.defined()),
             "indexer: candidate blocks need a block size");
    struct Item { int seq, token; };
    std::vector<Item> items;
    for (int s = 0; s < static_cast<int>(seqs.size()); ++s)
        for (int t = 0; t < seqs[s].num_tokens; ++t) items.push_back({s, t});
    pool_.run(static_cast<int64_t>(items.size()), [&](int64_t task) {
        const Item& it = items[task];
        const SeqSlice& s = seqs[it.seq];
        int64_t row = s.token_begin + it.token, pos = s.start_pos + it.token;
        int64_t visible = (pos + 1) / a.rate;
        thread_local std::vector<float> keys, dots, score;
        thread_local std::vector<int32_t> ids;
        keys.resize(visible * dim);
        for (int64_t e = 0; e < visible; ++e) load_row(a.keys->pool, entry_at(*a.keys, it.seq, e), dim, keys.data() + e * dim);
        dots.resize(heads * visible);
        GemmArgs g{.x = a.q.data<float>() + row * heads * dim, .lda = dim, .w = keys.data(), .ldw = dim,
                   .w_dtype = DType::kF32, .y = dots.data(), .ldy = visible, .m = heads, .n = visible, .k = dim};
        gemm_rows(isa_, g, 0, visible);
        score.assign(visible, 0.0f);
        const float* w = a.weights.data<float>() + row * heads;
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t e = 0; e < visible; ++e) score[e] += w[h] * a.scale * std::max(dots[h * visible + e], 0.0f);
        competing_entries(a, row, visible, ids);
        write_top(ids, score.data(), k, a.out.data<int32_t>() + row * k);
        if (a.candidates_out.defined()) pick_candidate_blocks(a, row, visible, score);
    });
}

void CpuBackend::pool_groups(std::span<const SeqSlice> seqs, const PoolArgs& a) {
    int64_t dim = a.kv.dim(1), rate = a.rate, slots = a.carry.dim(1);
    DI_CHECK(slots >= rate && a.carry.dim(2) == 2 * dim, "pool_groups: carry {} does not match rate {} dim {}",
             a.carry.shape_string(), rate, dim);
    std::vector<int64_t> first_row(seqs.size() + 1, 0);
    for (size_t s = 0; s < seqs.size(); ++s)
        first_row[s + 1] = first_row[s] + (seqs[s].start_pos + seqs[s].num_tokens) / rate - seqs[s].start_pos / rate;
    DI_CHECK(a.out.dim(0) == first_row.back(), "pool_groups: out has {} rows for {} groups", a.out.dim(0),
             first_row.back());
    pool_.run(static_cast<int64_t>(seqs.size()), [&](int64_t si) {
        const SeqSlice& s = seqs[si];
        float* carry = a.carry.data<float>() + static_cast<int64_t>(s.state_idx) * slots * 2 * dim;
        int64_t out_row = first_row[si];
        for (int t = 0; t < s.num_tokens; ++t) {
            int64_t pos = s.start_pos + t, row = s.token_begin + t;
            float* slot = carry + (pos % slots) * 2 * dim;
            std::memcpy(slot, a.kv.data<float>() + row * dim, dim * sizeof(float));
            std::memcpy(slot + dim, a.gate.data<float>() + row * dim, dim * sizeof(float));
            if ((pos + 1) % rate != 0) continue;
            auto token = [&](int64_t j) { return carry + ((pos + 1 - rate + j) % slots) * 2 * dim; };
            float* out = a.out.data<float>() + out_row++ * dim;
            for (int64_t ch = 0; ch < dim; ++ch) {
                float mx = -std::numeric_limits<float>::infinity();
                for (int64_t j = 0; j < rate; ++j) mx = std::max(mx, token(j)[dim + ch]);
                float sum = 0.0f, acc = 0.0f;
                for (int64_t j = 0; j < rate; ++j) {
                    float e = std::exp(token(j)[dim + ch] - mx);
                    sum += e;
                    acc += e * token(j)[ch];
                }
                out[ch] = acc / sum;
            }
        }
    });
}

void CpuBackend::store_entries(std::span<const EntrySlot> slots, const Tensor& rows, const EntryStore& store) {
    int64_t dim = store.pool.dim(2);
    DI_CHECK(rows.dim(0) == static_cast<int64_t>(slots.size()) && rows.dim(1) == dim,
             "store_entries: {} rows of {} for {} slots of width {}", rows.dim(0), rows.dim(1), slots.size(), dim);
    for (size_t i = 0; i < slots.size(); ++i)
        if (slots[i].entry >= 0)
            store_row(rows.data<float>() + i * dim, dim, store.pool, entry_at(store, slots[i].seq, slots[i].entry));
}

}  // namespace deepinfer::kernels::cpu
