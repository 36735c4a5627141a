#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/error.h"
#include "kernels/ref/ref_backend_impl.h"

namespace deepinfer::kernels::ref {
namespace {

const float* entry_ptr(const EntryStore& st, int seq, int64_t e) {
    int64_t block = st.pool.dim(1), dim = st.pool.dim(2);
    return st.pool.data<float>() + (st.tables[seq][e / block] * block + e % block) * dim;
}

double dot(const float* a, const float* b, int64_t n) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(a[i]) * b[i];
    return acc;
}

// out[h] = softmax([q[h] . key_j * scale, sink_h]) without the sink column, applied to the keys.
void attend_keys(const float* q, const std::vector<const float*>& keys, int64_t heads, int64_t d, float scale,
                 const Tensor& sinks, float* out) {
    for (int64_t h = 0; h < heads; ++h) {
        const float* qh = q + h * d;
        std::vector<double> logit(keys.size());
        double sink = sinks.data<float>()[h], mx = sink;
        for (size_t j = 0; j < keys.size(); ++j) mx = std::max(mx, logit[j] = dot(qh, keys[j], d) * scale);
        double denom = std::exp(sink - mx);
        for (double& l : logit) denom += l = std::exp(l - mx);
        for (int64_t c = 0; c < d; ++c) {
            double acc = 0.0;
            for (size_t j = 0; j < keys.size(); ++j) acc += logit[j] / denom * keys[j][c];
            out[h * d + c] = static_cast<float>(acc);
        }
    }
}

}  // namespace

void RefBackend::attention(std::span<const SeqSlice> seqs, const AttentionArgs& a) {
    int64_t heads = a.q.dim(1), d = a.q.dim(2), slots = a.ring.dim(1);
    for (size_t s = 0; s < seqs.size(); ++s) {
        const SeqSlice& sl = seqs[s];
        for (int t = 0; t < sl.num_tokens; ++t) {
            int64_t pos = sl.start_pos + t, row = sl.token_begin + t;
            std::vector<const float*> keys;
            for (int64_t q = std::max<int64_t>(sl.window_from, pos - a.window + 1); q <= pos; ++q)
                keys.push_back(q >= sl.start_pos ? a.kv.data<float>() + (sl.token_begin + q - sl.start_pos) * d
                                                 : a.ring.data<float>() + (sl.state_idx * slots + q % slots) * d);
            if (a.compressed == AttentionArgs::Compressed::kAllVisible) {
                for (int64_t e = 0; e < (pos + 1) / a.rate; ++e) keys.push_back(entry_ptr(*a.entries, s, e));
            } else if (a.compressed == AttentionArgs::Compressed::kSelected) {
                for (int64_t i = 0; i < a.selected.dim(1); ++i) {
                    int32_t e = a.selected.data<int32_t>()[row * a.selected.dim(1) + i];
                    if (e >= 0) keys.push_back(entry_ptr(*a.entries, s, e));
                }
            }
            attend_keys(a.q.data<float>() + row * heads * d, keys, heads, d, a.scale, a.sinks,
                        a.out.data<float>() + row * heads * d);
        }
    }
}

void RefBackend::block_attention(std::span<const SeqSlice> seqs, const BlockAttentionArgs& a) {
    int64_t heads = a.q.dim(1), d = a.q.dim(2), slots = a.ring.dim(1);
    DI_CHECK(a.ring.dtype() == DType::kF32, "block attention: the ring must be fp32");
    for (const SeqSlice& sl : seqs) {
        DI_CHECK(sl.start_pos - sl.window_from <= slots, "block attention: context longer than the ring");
        std::vector<const float*> keys;
        for (int64_t p = sl.window_from; p < sl.start_pos; ++p)
            keys.push_back(a.ring.data<float>() + (sl.state_idx * slots + p % slots) * d);
        for (int j = 0; j < sl.num_tokens; ++j) keys.push_back(a.kv.data<float>() + (sl.token_begin + j) * d);
        for (int t = 0; t < sl.num_tokens; ++t) {
            int64_t row = sl.token_begin + t;
            attend_keys(a.q.data<float>() + row * heads * d, keys, heads, d, a.scale, a.sinks,
                        a.out.data<float>() + row * heads * d);
        }
    }
}

void RefBackend::ring_write(std::span<const SeqSlice> seqs, const Tensor& kv, Tensor& ring) {
    int64_t slots = ring.dim(1), d = ring.dim(2);
    for (const SeqSlice& s : seqs)
        for (int t = 0; t < s.num_tokens; ++t)  // later tokens overwrite earlier ones in the same slot
            std::copy_n(kv.data<float>() + (s.token_begin + t) * d, d,
                        ring.data<float>() + (s.state_idx * slots + (s.start_pos + t) % slots) * d);
}

void RefBackend::compressor_update(std::span<const SeqSlice> seqs, const CompressorArgs& a) {
    const int c = a.overlap ? 2 : 1;
    const int64_t slots = a.carry.dim(1), width = 2 * c * a.dim, cd = c * a.dim;
    DI_CHECK(slots >= c * a.rate, "compressor: carry of {} slots is shorter than {}", slots, c * a.rate);
    for (size_t s = 0; s < seqs.size(); ++s) {
        const SeqSlice& sl = seqs[s];
        float* carry = a.carry.data<float>() + sl.state_idx * slots * width;
        for (int t = 0; t < sl.num_tokens; ++t) {
            int64_t pos = sl.start_pos + t, row = sl.token_begin + t;
            float* slot = carry + (pos % slots) * width;
            std::copy_n(a.kv.data<float>() + row * cd, cd, slot);
            std::copy_n(a.gate.data<float>() + row * cd, cd, slot + cd);
            if ((pos + 1) % a.rate != 0) continue;
            int64_t w = pos / a.rate;
            std::vector<double> entry(a.dim);
            for (int ch = 0; ch < a.dim; ++ch) {
                std::vector<std::pair<double, double>> terms;  // (logit, value)
                for (int j = 0; a.overlap && w > 0 && j < a.rate; ++j) {
                    const float* tok = carry + (((w - 1) * a.rate + j) % slots) * width;
                    terms.emplace_back(tok[cd + ch] + a.ape.data<float>()[j * cd + ch], tok[ch]);
                }
                int off = a.overlap ? a.dim : 0;
                for (int j = 0; j < a.rate; ++j) {
                    const float* tok = carry + ((w * a.rate + j) % slots) * width;
                    terms.emplace_back(tok[cd + off + ch] + a.ape.data<float>()[j * cd + off + ch], tok[off + ch]);
                }
                double mx = -std::numeric_limits<double>::infinity(), sum = 0.0, acc = 0.0;
                for (auto& [l, v] : terms) mx = std::max(mx, l);
                for (auto& [l, v] : terms) {
                    sum += std::exp(l - mx);
                    acc += std::exp(l - mx) * v;
                }
                entry[ch] = acc / sum;
            }
            double ss = 0.0;
            for (double v : entry) ss += v * v;
            double inv = 1.0 / std::sqrt(ss / a.dim + a.norm_eps);
            float* out = const_cast<float*>(entry_ptr(*a.out, s, w));
            for (int ch = 0; ch < a.dim; ++ch) out[ch] = static_cast<float>(entry[ch] * inv * a.norm.data<float>()[ch]);
            Tensor one = Tensor::wrap(out, DType::kF32, {1, a.dim}, nullptr);
            int64_t p = w * a.rate;
            rope(one, Tensor::wrap(&p, DType::kI64, {1}, nullptr), 1, a.rope, false);
        }
    }
}

namespace {

// Ids of the k best (score, id) pairs, best first, ties to the lower id; -1 padded.
void write_best(std::vector<std::pair<double, int32_t>> scored, int64_t k, int32_t* out) {
    for (auto& [score, id] : scored) score = -score;  // ascending = best first
    std::sort(scored.begin(), scored.end());
    for (int64_t i = 0; i < k; ++i) out[i] = i < static_cast<int64_t>(scored.size()) ? scored[i].second : -1;
}

bool in_candidates(const IndexerArgs& a, int64_t row, int64_t e) {
    if (!a.candidates_in.defined()) return true;
    for (int64_t i = 0; i < a.candidates_in.dim(1); ++i) {
        int32_t b = a.candidates_in.data<int32_t>()[row * a.candidates_in.dim(1) + i];
        if (b >= 0 && e / a.candidate_block_size == b) return true;
    }
    return false;
}

}  // namespace

void RefBackend::indexer_topk(std::span<const SeqSlice> seqs, const IndexerArgs& a) {
    int64_t heads = a.q.dim(1), dim = a.q.dim(2), k = a.top_k;
    for (size_t s = 0; s < seqs.size(); ++s) {
        const SeqSlice& sl = seqs[s];
        for (int t = 0; t < sl.num_tokens; ++t) {
            int64_t pos = sl.start_pos + t, row = sl.token_begin + t, visible = (pos + 1) / a.rate;
            std::vector<double> score(visible, 0.0);
            for (int64_t e = 0; e < visible; ++e)
                for (int64_t h = 0; h < heads; ++h)
                    score[e] += a.weights.data<float>()[row * heads + h] * static_cast<double>(a.scale) *
                                std::max(0.0, dot(a.q.data<float>() + (row * heads + h) * dim, entry_ptr(*a.keys, s, e), dim));
            std::vector<std::pair<double, int32_t>> scored;
            for (int64_t e = 0; e < visible; ++e)
                if (in_candidates(a, row, e)) scored.emplace_back(score[e], static_cast<int32_t>(e));
            write_best(scored, k, a.out.data<int32_t>() + row * k);
            if (!a.candidates_out.defined()) continue;
            int64_t bs = a.candidate_block_size, nb = (visible + bs - 1) / bs;
            std::vector<std::pair<double, int32_t>> blocks;
            for (int64_t b = 0; b < nb; ++b) {
                double best = b == nb - 1 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
                for (int64_t e = b * bs; e < std::min(visible, (b + 1) * bs); ++e) best = std::max(best, score[e]);
                blocks.emplace_back(best, static_cast<int32_t>(b));
            }
            int64_t c = a.candidates_out.dim(1);
            write_best(blocks, c, a.candidates_out.data<int32_t>() + row * c);
        }
    }
}

void RefBackend::pool_groups(std::span<const SeqSlice> seqs, const PoolArgs& a) {
    int64_t dim = a.kv.dim(1), rate = a.rate, slots = a.carry.dim(1), out_row = 0;
    DI_CHECK(slots >= rate, "pool_groups: carry of {} slots is shorter than the rate {}", slots, rate);
    for (const SeqSlice& sl : seqs) {
        float* carry = a.carry.data<float>() + sl.state_idx * slots * 2 * dim;
        for (int t = 0; t < sl.num_tokens; ++t) {
            int64_t pos = sl.start_pos + t, row = sl.token_begin + t;
            std::copy_n(a.kv.data<float>() + row * dim, dim, carry + (pos % slots) * 2 * dim);
            std::copy_n(a.gate.data<float>() + row * dim, dim, carry + (pos % slots) * 2 * dim + dim);
            if ((pos + 1) % rate != 0) continue;
            auto token = [&](int64_t j) { return carry + ((pos + 1 - rate + j) % slots) * 2 * dim; };
            for (int64_t ch = 0; ch < dim; ++ch) {
                double mx = -std::numeric_limits<double>::infinity(), sum = 0.0, acc = 0.0;
                for (int64_t j = 0; j < rate; ++j) mx = std::max<double>(mx, token(j)[dim + ch]);
                for (int64_t j = 0; j < rate; ++j) {
                    double e = std::exp(token(j)[dim + ch] - mx);
                    sum += e;
                    acc += e * token(j)[ch];
                }
                a.out.data<float>()[out_row * dim + ch] = static_cast<float>(acc / sum);
            }
            ++out_row;
        }
    }
}

void RefBackend::store_entries(std::span<const EntrySlot> slots, const Tensor& rows, const EntryStore& store) {
    int64_t dim = store.pool.dim(2);
    for (size_t i = 0; i < slots.size(); ++i)
        if (slots[i].entry >= 0)
            std::copy_n(rows.data<float>() + i * dim, dim, const_cast<float*>(entry_ptr(store, slots[i].seq, slots[i].entry)));
}

}  // namespace deepinfer::kernels::ref
