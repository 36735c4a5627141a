// Compressors (softmax-gated window pooling into entries) and the lightning indexer on the CPU.
//
// The compressor keeps the raw kv|gate projections of the most recent tokens in a per-sequence
// carry ring: `rate` slots, or 2*rate with overlap so that the previous window's first-half series
// (Ca) is still there when the current window closes. Window w covers positions
// [w*rate, (w+1)*rate) and closes at its last token, appending entry w.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "base/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/math.h"

namespace deepinfer::kernels::cpu {
namespace {

float* entry_row(const EntryStore& st, int seq_idx, int64_t e) {
    int64_t block = st.pool.dim(1), dim = st.pool.dim(2);
    DI_CHECK(e / block < static_cast<int64_t>(st.tables[seq_idx].size()),
             "entry store: no block allocated for entry {}", e);
    return st.pool.data<float>() + (static_cast<int64_t>(st.tables[seq_idx][e / block]) * block + e % block) * dim;
}

// Pools window `w` of one sequence into `out` [dim] (before norm and rope).
void pool_window(const CompressorArgs& a, const float* carry, int64_t w, float* out) {
    const int rate = a.rate, dim = a.dim;
    const int c = a.overlap ? 2 : 1;
    const int64_t slots = c * rate, width = 2 * c * dim;
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
    const int64_t slots = c * a.rate, width = 2 * c * a.dim;
    DI_CHECK(a.kv.dim(1) == c * a.dim && a.carry.dim(1) == slots && a.carry.dim(2) == width,
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
            float* entry = entry_row(*a.out, static_cast<int>(si), w);
            pool_window(a, carry, w, entry);
            finish_entry(a, w, entry);
        }
    });
}

void CpuBackend::indexer_topk(std::span<const SeqSlice> seqs, const IndexerArgs& a) {
    int64_t heads = a.q.dim(1), dim = a.q.dim(2), k = a.top_k;
    DI_CHECK(a.out.dim(1) == k, "indexer: output {} does not hold top_k={}", a.out.shape_string(), k);
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
        thread_local std::vector<int32_t> order;
        keys.resize(visible * dim);
        for (int64_t e = 0; e < visible; ++e)
            std::memcpy(keys.data() + e * dim, entry_row(*a.keys, it.seq, e), dim * sizeof(float));
        dots.resize(heads * visible);
        GemmArgs g{.x = a.q.data<float>() + row * heads * dim, .lda = dim, .w = keys.data(), .ldw = dim,
                   .w_dtype = DType::kF32, .y = dots.data(), .ldy = visible, .m = heads, .n = visible, .k = dim};
        gemm_rows(isa_, g, 0, visible);
        score.assign(visible, 0.0f);
        const float* w = a.weights.data<float>() + row * heads;
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t e = 0; e < visible; ++e) score[e] += w[h] * a.scale * std::max(dots[h * visible + e], 0.0f);
        order.resize(visible);
        std::iota(order.begin(), order.end(), 0);
        int64_t keep = std::min(k, visible);
        std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int32_t x, int32_t y) {
            return score[x] > score[y] || (score[x] == score[y] && x < y);
        });
        int32_t* out = a.out.data<int32_t>() + row * k;
        for (int64_t i = 0; i < k; ++i) out[i] = i < keep ? order[i] : -1;
    });
}

}  // namespace deepinfer::kernels::cpu
