// Attention, compressors and the indexer of the CPU backend (every instruction set the machine
// has) and of the CUDA backend (when a GPU is present) against the scalar reference backend, on
// random inputs: sliding-window rings, paged compressed entries and bounded replay, compressor
// carries and pair pooling, the indexer's top-k and its two-level candidate selection.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "base/error.h"
#include "tests/kernels/backend_ops_fixture.h"

namespace deepinfer::kernels {
namespace {

using test::all_close;
using test::copy_of;
using test::random_f32;
using namespace ops_test;

class BackendOpsAttention : public BackendOps {};

// Three sequences mid-stream: one decoding, one prefilling past the window, one fresh.
struct Scenario {
    std::vector<SeqSlice> seqs;
    int64_t num_tokens = 0;
    std::vector<std::vector<int32_t>> tables;
    Tensor pool;
    EntryStore store() const {
        EntryStore s{pool, {}};
        for (const auto& t : tables) s.tables.push_back(t);
        return s;
    }
};

using SeqShapes = std::vector<std::pair<int64_t, int>>;  // (start_pos, new tokens) per sequence

Scenario make_scenario(std::mt19937& rng, int64_t dim, int rate, int block,
                       const SeqShapes& shapes = {{41, 1}, {9, 23}, {0, 13}}) {
    Scenario sc;
    int32_t begin = 0, state = 2;
    int64_t blocks_total = 0;
    for (auto [start, count] : shapes) {
        sc.seqs.push_back({begin, count, start, state--});
        begin += count;
        int64_t entries = (start + count) / rate + 1;
        sc.tables.emplace_back((entries + block - 1) / block);
        blocks_total += static_cast<int64_t>(sc.tables.back().size());
    }
    std::vector<int32_t> ids(blocks_total);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);  // blocks scattered through the pool
    size_t next = 0;
    for (auto& t : sc.tables)
        for (auto& b : t) b = ids[next++];
    sc.num_tokens = begin;
    if (sc.seqs.size() > 1) sc.seqs[1].window_from = std::min<int64_t>(12, sc.seqs[1].start_pos + 3);  // bounded replay
    sc.pool = random_f32({blocks_total, block, dim}, rng);
    return sc;
}

// Random queries, keys, ring, sinks and indexer picks (valid ones packed first) for a scenario's
// step; rate 4; the entries are `store`'s.
AttentionArgs random_attention(std::mt19937& rng, const Scenario& sc, EntryStore& store, int64_t heads, int64_t d,
                               int window, int picks) {
    constexpr int rate = 4;
    AttentionArgs a;
    a.q = random_f32({sc.num_tokens, heads, d}, rng);
    a.kv = random_f32({sc.num_tokens, d}, rng);
    a.ring = random_f32({3, window - 1, d}, rng);
    a.window = window;
    a.entries = &store;
    a.rate = rate;
    a.sinks = random_f32({heads}, rng);
    a.scale = 0.3f;
    a.selected = Tensor::empty(DType::kI32, {sc.num_tokens, picks});
    for (const auto& s : sc.seqs)
        for (int t = 0; t < s.num_tokens; ++t) {
            int64_t visible = (s.start_pos + t + 1) / rate;
            for (int i = 0; i < picks; ++i)
                a.selected.data<int32_t>()[(s.token_begin + t) * picks + i] =
                    i < visible ? static_cast<int32_t>(rng() % visible) : -1;
        }
    return a;
}

// A mixed step (prefill and decode), and decode steps of long sequences. Steps of few (token,
// head) pairs take the GPU's decode kernel (keys split over blocks, merged by the last block;
// attend_and_store stores the keys and de-ropes the output in that merge), with one head group
// or several (the last one partial), a head_dim that leaves lanes idle and V4-Flash's 64 heads x
// 512; the mixed step with 20 heads and the two prefills take the tiled kernel (head groups of 10
// and 16, key lists that end inside a tile), or with attention_tiled=0 the block-per-(token,
// head) kernel.
TEST_P(BackendOpsAttention, AttentionAllModes) {
    struct Case {
        SeqShapes shapes;
        int window, picks;
        int64_t heads, d;
    };
    // Each variant set restores what the one before it moved.
    for (const VariantSet& set : {VariantSet{}, VariantSet{{"attention_decode", 0}},
                                  VariantSet{{"attention_decode", 1}, {"attention_decode_splits", 32}},
                                  VariantSet{{"attention_decode_splits", 1}}, VariantSet{{"attention_tiled", 0}}}) {
        if (!apply_variants(*cpu, set)) continue;
        for (const Case& cs : {Case{{{41, 1}, {9, 23}, {0, 13}}, 8, 3, 4, 32},
                               Case{{{300, 1}, {150, 1}}, 128, 80, 4, 32},
                               Case{{{41, 1}, {9, 23}, {0, 13}}, 8, 3, 20, 32},
                               Case{{{200, 1}, {70, 2}}, 64, 24, 20, 96},
                               Case{{{300, 1}}, 128, 80, 64, 512},  // V4-Flash's heads and head_dim
                               Case{{{0, 70}, {100, 30}}, 64, 40, 16, 512}}) {
            SCOPED_TRACE("heads " + std::to_string(cs.heads) + variant_label(set));
            int64_t heads = cs.heads, d = cs.d;
            int window = cs.window, rate = 4, picks = cs.picks;
            Scenario sc = make_scenario(rng, d, rate, 5, cs.shapes);
            EntryStore store = sc.store();
            AttentionArgs a = random_attention(rng, sc, store, heads, d, window, picks);
            for (auto mode : {AttentionArgs::Compressed::kNone, AttentionArgs::Compressed::kAllVisible,
                              AttentionArgs::Compressed::kSelected}) {
                a.compressed = mode;
                AttentionArgs b = a;
                a.out = Tensor::empty(DType::kF32, {sc.num_tokens, heads, d});
                b.out = Tensor::empty(DType::kF32, {sc.num_tokens, heads, d});
                cpu->attention(sc.seqs, a);
                ref->attention(sc.seqs, b);
                EXPECT_TRUE(all_close(a.out, b.out, tol)) << "mode " << static_cast<int>(mode) << ", window " << window;
            }
            Tensor ra = copy_of(a.ring), rb = copy_of(a.ring);
            cpu->ring_write(sc.seqs, a.kv, ra);
            ref->ring_write(sc.seqs, a.kv, rb);
            EXPECT_TRUE(all_close(ra, rb, 0.0));
            // attend_and_store (queries normalised and roped first, with and without the norm) against
            // the query norm and rope, attention, ring_write and the output's inverse rope.
            std::vector<int64_t> pos;
            for (const auto& s : sc.seqs)
                for (int t = 0; t < s.num_tokens; ++t) pos.push_back(s.start_pos + t);
            Tensor at_pos = positions(pos);
            Rope rope{rope_freqs(16, 10000.0f), 16, 0.9f};
            bool norm_q = window >= 64;
            AttentionArgs b = a;
            a.ring = copy_of(a.ring), b.ring = copy_of(a.ring);
            a.out = Tensor::empty(DType::kF32, {sc.num_tokens, heads, d});
            b.out = Tensor::empty(DType::kF32, {sc.num_tokens, heads, d});
            a.q = random_f32({sc.num_tokens, heads, d}, rng, 3.0f), b.q = copy_of(a.q);
            cpu->attend_and_store(sc.seqs, a, at_pos, rope, {norm_q, 1e-6f, &rope});
            Tensor qb = b.q.reshape({sc.num_tokens * heads, d});
            if (norm_q) ref->rms_norm(qb, nullptr, 1e-6f, qb);
            ref->rope(qb, at_pos, static_cast<int>(heads), rope, false);
            ref->attention(sc.seqs, b);
            ref->ring_write(sc.seqs, b.kv, b.ring);
            Tensor ob = b.out.reshape({sc.num_tokens * heads, d});
            ref->rope(ob, at_pos, static_cast<int>(heads), rope, true);
            EXPECT_TRUE(all_close(a.out, b.out, tol)) << "attend_and_store, window " << window;
            EXPECT_TRUE(all_close(a.ring, b.ring, 0.0)) << "attend_and_store ring, window " << window;
        }
    }
}

// The fast precision takes CUDA's large steps to tensor cores (attention_mma.cu: queries, keys
// and weights rounded to bf16, fp32 sums): within bf16's rounding of the reference, and not the
// default precision's bits (else the tensor-core kernel did not run), at the models' logit
// scale. Heads per block are 32:
// V4-Flash's 64 x 512, one group of 32 over a short window (key lists ending inside a tile), 96
// heads of 128.
TEST_P(BackendOpsAttention, FastPrecisionAttention) {
    if (on_host()) GTEST_SKIP() << "the CPU's attention is fp32 in every precision";
    ASSERT_TRUE(apply_variants(*cpu, {{"attention_mma", 1}}));
    struct Case {
        SeqShapes shapes;
        int window, picks;
        int64_t heads, d;
    };
    for (const Case& cs : {Case{{{0, 70}, {100, 30}}, 64, 40, 64, 512}, Case{{{41, 1}, {9, 23}, {0, 13}}, 8, 3, 32, 64},
                           Case{{{0, 40}, {60, 20}}, 128, 80, 96, 128}}) {
        SCOPED_TRACE("heads " + std::to_string(cs.heads) + " x " + std::to_string(cs.d));
        Scenario sc = make_scenario(rng, cs.d, 4, 5, cs.shapes);
        EntryStore store = sc.store();
        AttentionArgs a = random_attention(rng, sc, store, cs.heads, cs.d, cs.window, cs.picks);
        // Models scale logits by head_dim^-0.5. At 0.3 (above) the logits of 512-wide random rows
        // spread so far that bf16's rounding of queries and keys (~2^-9 each) moves the softmax
        // weights by a few percent; at the models' scale it moves them by well under 1%.
        a.scale = 1.0f / std::sqrt(static_cast<float>(cs.d));
        auto attend = [&](Backend& b, MatmulPrecision precision) {
            b.execution().set_matmul_precision(precision);
            AttentionArgs args = a;
            args.out = Tensor::empty(DType::kF32, {sc.num_tokens, cs.heads, cs.d});
            b.attention(sc.seqs, args);
            return args.out;
        };
        for (auto mode : {AttentionArgs::Compressed::kNone, AttentionArgs::Compressed::kAllVisible,
                          AttentionArgs::Compressed::kSelected}) {
            a.compressed = mode;
            Tensor want = attend(*ref, MatmulPrecision::kFp32);
            Tensor fast = attend(*cpu, MatmulPrecision::kBf16), other = attend(*cpu, MatmulPrecision::kBf16x2);
            EXPECT_TRUE(all_close(fast, want, 1e-2)) << "mode " << static_cast<int>(mode);
            EXPECT_TRUE(all_close(other, want, tol)) << "mode " << static_cast<int>(mode);
            EXPECT_FALSE(all_close(fast, other, 1e-6)) << "mode " << static_cast<int>(mode)
                                                       << ": the fast precision changed nothing; did the tensor cores run?";
        }
    }
}

TEST_P(BackendOpsAttention, CompressorsAndIndexer) {
    int rate = 4;
    // dim 520 with overlap: carry rows of 1,040 values, more than one chunk per thread on the GPU.
    // Slack: carry rows beyond the windows' (kept for positions a speculative step takes back).
    struct Case {
        int dim;
        bool overlap;
        int slack;
    };
    for (auto [dim, overlap, slack] : {Case{16, false, 0}, {16, true, 0}, {520, true, 0}, {16, false, 3}, {16, true, 5}}) {
        int c = overlap ? 2 : 1;
        Scenario sc = make_scenario(rng, dim, rate, 3);
        CompressorArgs a;
        a.kv = random_f32({sc.num_tokens, c * dim}, rng);
        a.gate = random_f32({sc.num_tokens, c * dim}, rng);
        a.ape = random_f32({rate, c * dim}, rng);
        a.norm = random_f32({dim}, rng);
        a.rope = {rope_freqs(8, 160000.0f), 8, 1.0f};
        a.rate = rate;
        a.dim = dim;
        a.overlap = overlap;
        a.carry = random_f32({3, c * rate + slack, 2 * c * dim}, rng);
        CompressorArgs b = a;
        b.carry = copy_of(a.carry);
        Tensor pool_b = copy_of(sc.pool);
        EntryStore sa = sc.store(), sb = sc.store();
        sb.pool = pool_b;
        a.out = &sa;
        b.out = &sb;
        cpu->compressor_update(sc.seqs, a);
        ref->compressor_update(sc.seqs, b);
        EXPECT_TRUE(all_close(sc.pool, pool_b, tol)) << "overlap " << overlap << ", slack " << slack;
        EXPECT_TRUE(all_close(a.carry, b.carry, 0.0)) << "overlap " << overlap << ", slack " << slack;

        // k = 4 picks among up to 8 visible entries; k = 16 takes them all (the GPU skips the scores).
        for (int top_k : {4, 16}) {
            IndexerArgs ia;
            ia.q = random_f32({sc.num_tokens, 3, dim}, rng);
            ia.weights = random_f32({sc.num_tokens, 3}, rng);
            ia.scale = 0.2f;
            ia.keys = &sa;
            ia.rate = rate;
            ia.top_k = top_k;
            IndexerArgs ib = ia;
            ia.out = Tensor::empty(DType::kI32, {sc.num_tokens, top_k});
            ib.out = Tensor::empty(DType::kI32, {sc.num_tokens, top_k});
            cpu->indexer_topk(sc.seqs, ia);
            ref->indexer_topk(sc.seqs, ib);
            for (int64_t r = 0; r < sc.num_tokens; ++r) {  // same set; order within the top-k is free
                std::vector<int32_t> x(ia.out.data<int32_t>() + r * top_k, ia.out.data<int32_t>() + (r + 1) * top_k);
                std::vector<int32_t> y(ib.out.data<int32_t>() + r * top_k, ib.out.data<int32_t>() + (r + 1) * top_k);
                std::sort(x.begin(), x.end());
                std::sort(y.begin(), y.end());
                EXPECT_EQ(x, y) << "row " << r << ", k " << top_k;
            }
        }
    }
}

// Random queries and head weights over `keys` for two heads.
IndexerArgs two_head_indexer(std::mt19937& rng, int64_t tokens, int64_t dim, float scale, const EntryStore* keys, int rate,
                             int top_k) {
    IndexerArgs a;
    a.q = random_f32({tokens, 2, dim}, rng);
    a.weights = random_f32({tokens, 2}, rng);
    a.scale = scale;
    a.keys = keys;
    a.rate = rate;
    a.top_k = top_k;
    return a;
}

// Rows longer than the GPU's rank-counting selection takes (2,048 entries) and short ones in one
// step: the GPU sorts them (or, with indexer_sort=0, takes repeated argmaxes). Ids and their order
// must equal the reference's; with two heads of 8 dims many scores are relu zeros of either sign,
// so ties go to the lower id.
TEST_P(BackendOpsAttention, IndexerLongRows) {
    int rate = 1, dim = 8, top_k = 40;
    Scenario sc = make_scenario(rng, dim, rate, 64, {{2300, 2}, {5, 9}});
    EntryStore store = sc.store();
    IndexerArgs a = two_head_indexer(rng, sc.num_tokens, dim, 0.5f, &store, rate, top_k);
    IndexerArgs b = a;
    b.out = Tensor::empty(DType::kI32, {sc.num_tokens, top_k});
    ref->indexer_topk(sc.seqs, b);
    for (const VariantSet& set : {VariantSet{}, VariantSet{{"indexer_sort", 0}}}) {
        if (!apply_variants(*cpu, set)) continue;
        a.out = Tensor::empty(DType::kI32, {sc.num_tokens, top_k});
        cpu->indexer_topk(sc.seqs, a);
        EXPECT_EQ(std::memcmp(a.out.raw(), b.out.raw(), a.out.nbytes()), 0) << variant_label(set);
    }
    apply_variants(*cpu, {});
}

// Σ_h w_h · scale · relu(q_h · k_e) of row `row` (a token of sequence `s`) in double.
double indexer_score(const IndexerArgs& a, const Scenario& sc, size_t s, int64_t row, int64_t e) {
    int64_t heads = a.q.dim(1), dim = a.q.dim(2), block = sc.pool.dim(1);
    const float* k = sc.pool.data<float>() + (sc.tables[s][e / block] * block + e % block) * dim;
    double score = 0;
    for (int64_t h = 0; h < heads; ++h) {
        const float* q = a.q.data<float>() + (row * heads + h) * dim;
        double dot = 0;
        for (int64_t c = 0; c < dim; ++c) dot += static_cast<double>(q[c]) * k[c];
        score += a.weights.data<float>()[row * heads + h] * static_cast<double>(a.scale) * std::max(dot, 0.0);
    }
    return score;
}

// The fast precision scores CUDA's indexer on tensor cores (indexer_mma.cu: bf16 queries and
// keys, V4's 64 heads x 128): a row's picks may differ from the fp32 scores' only among near
// ties, so every pick's exact score is within bf16's rounding of the row's k-th best, and a row
// picks as many entries as it sees (up to k), none twice.
TEST_P(BackendOpsAttention, FastPrecisionIndexer) {
    if (on_host()) GTEST_SKIP() << "the CPU's indexer is fp32 in every precision";
    int rate = 4, dim = 128, top_k = 24;
    Scenario sc = make_scenario(rng, dim, rate, 16, {{500, 40}, {0, 30}, {90, 1}});
    EntryStore store = sc.store();
    IndexerArgs a;
    a.q = random_f32({sc.num_tokens, 64, dim}, rng);
    a.weights = random_f32({sc.num_tokens, 64}, rng);
    a.scale = 0.05f, a.keys = &store, a.rate = rate, a.top_k = top_k;
    a.out = Tensor::empty(DType::kI32, {sc.num_tokens, top_k});
    cpu->execution().set_matmul_precision(MatmulPrecision::kBf16);
    ASSERT_TRUE(apply_variants(*cpu, {{"indexer_mma", 1}}));
    cpu->indexer_topk(sc.seqs, a);
    for (size_t s = 0; s < sc.seqs.size(); ++s)
        for (int t = 0; t < sc.seqs[s].num_tokens; ++t) {
            int64_t row = sc.seqs[s].token_begin + t, visible = (sc.seqs[s].start_pos + t + 1) / rate;
            std::vector<double> exact(visible);
            for (int64_t e = 0; e < visible; ++e) exact[e] = indexer_score(a, sc, s, row, e);
            std::vector<double> sorted = exact;
            std::sort(sorted.rbegin(), sorted.rend());
            int64_t picks = std::min<int64_t>(visible, top_k);
            double kth = picks > 0 ? sorted[picks - 1] : 0, slack = 1e-2 * (std::abs(sorted.empty() ? 0 : sorted[0]) + 1e-6);
            std::vector<bool> seen(visible);
            for (int i = 0; i < top_k; ++i) {
                int32_t id = a.out.data<int32_t>()[row * top_k + i];
                if (i >= picks) {
                    EXPECT_EQ(id, -1) << "row " << row << " pick " << i;
                    continue;
                }
                ASSERT_TRUE(id >= 0 && id < visible && !seen[id]) << "row " << row << " pick " << i << " id " << id;
                seen[id] = true;
                EXPECT_GE(exact[id], kth - slack) << "row " << row << " picked entry " << id << " below the k-th best";
            }
        }
}

TEST_P(BackendOpsAttention, PairPoolingAndEntryStores) {
    int rate = 2;
    int64_t dim = 12;
    for (int slack : {0, 3}) {  // carry rows beyond the rate: kept for positions a step takes back
        Scenario sc = make_scenario(rng, dim, rate, 3);
        PoolArgs a;
        a.kv = random_f32({sc.num_tokens, dim}, rng);
        a.gate = random_f32({sc.num_tokens, dim}, rng, 2.0f);
        a.rate = rate;
        a.carry = random_f32({3, rate + slack, 2 * dim}, rng);
        int64_t groups = 0;
        std::vector<EntrySlot> slots;
        for (size_t s = 0; s < sc.seqs.size(); ++s)
            for (int64_t e = sc.seqs[s].start_pos / rate; e < (sc.seqs[s].start_pos + sc.seqs[s].num_tokens) / rate; ++e, ++groups)
                slots.push_back({static_cast<int32_t>(s), e});
        a.out = Tensor::empty(DType::kF32, {groups, dim});
        PoolArgs b = a;
        b.carry = copy_of(a.carry);
        b.out = Tensor::empty(DType::kF32, {groups, dim});
        cpu->pool_groups(sc.seqs, a);
        ref->pool_groups(sc.seqs, b);
        EXPECT_TRUE(all_close(a.out, b.out, tol)) << "slack " << slack;
        EXPECT_TRUE(all_close(a.carry, b.carry, 0.0)) << "slack " << slack;
        EntryStore sa = sc.store(), sb = sc.store();
        sb.pool = copy_of(sc.pool);
        cpu->store_entries(slots, a.out, sa);
        ref->store_entries(slots, a.out, sb);
        EXPECT_TRUE(all_close(sa.pool, sb.pool, 0.0));
    }
}

TEST_P(BackendOpsAttention, TwoLevelIndexerSelection) {
    int rate = 1, dim = 16, top_k = 5, block = 4, blocks = 3;
    Scenario sc = make_scenario(rng, dim, rate, 8);
    EntryStore keys = sc.store();
    IndexerArgs a = two_head_indexer(rng, sc.num_tokens, dim, 0.25f, &keys, rate, top_k);
    a.candidate_block_size = block;
    a.candidates_out = Tensor::empty(DType::kI32, {sc.num_tokens, blocks});
    a.out = Tensor::empty(DType::kI32, {sc.num_tokens, top_k});
    IndexerArgs b = a;
    b.candidates_out = Tensor::empty(DType::kI32, {sc.num_tokens, blocks});
    b.out = Tensor::empty(DType::kI32, {sc.num_tokens, top_k});
    cpu->indexer_topk(sc.seqs, a);
    ref->indexer_topk(sc.seqs, b);
    auto sorted_row = [](const Tensor& t, int64_t r) {
        std::vector<int32_t> v(t.data<int32_t>() + r * t.dim(1), t.data<int32_t>() + (r + 1) * t.dim(1));
        std::sort(v.begin(), v.end());
        return v;
    };
    for (int64_t r = 0; r < sc.num_tokens; ++r) EXPECT_EQ(sorted_row(a.candidates_out, r), sorted_row(b.candidates_out, r));
    // A second index source restricted to those blocks picks only inside them.
    a.candidates_in = b.candidates_in = a.candidates_out;
    a.candidates_out = b.candidates_out = Tensor();
    a.q = b.q = random_f32({sc.num_tokens, 2, dim}, rng);
    cpu->indexer_topk(sc.seqs, a);
    ref->indexer_topk(sc.seqs, b);
    for (int64_t r = 0; r < sc.num_tokens; ++r) {
        EXPECT_EQ(sorted_row(a.out, r), sorted_row(b.out, r)) << "row " << r;
        std::vector<int32_t> allowed = sorted_row(a.candidates_in, r);
        for (int32_t e : sorted_row(a.out, r))
            if (e >= 0) {
                EXPECT_TRUE(std::binary_search(allowed.begin(), allowed.end(), e / block)) << e;
            }
    }
    for (const auto& s : sc.seqs) {  // the block of the newest visible entry is always a candidate
        int64_t r = s.token_begin + s.num_tokens - 1, newest_block = (s.start_pos + s.num_tokens - 1) / block;
        std::vector<int32_t> c = sorted_row(a.candidates_in, r);
        if (s.num_tokens > 0) {
            EXPECT_TRUE(std::binary_search(c.begin(), c.end(), newest_block));
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendOpsAttention, ::testing::Values("scalar", "avx2", "avx512", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace deepinfer::kernels
