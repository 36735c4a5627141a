// Each op of the CPU backend (every instruction set the machine has) and of the CUDA backend (when
// a GPU is present) against the scalar reference backend, on random inputs: products, dense ops,
// mHC, MoE, the Engram gate, fake quantization (attention, compressors and the indexer:
// backend_attention_ops_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <tuple>
#include <random>

#include "base/error.h"
#include "core/quant_fp8.h"
#include "tests/kernels/backend_ops_fixture.h"

namespace deepinfer::kernels {
namespace {

using test::all_close;
using test::copy_of;
using test::random_bf16;
using test::random_f32;
using namespace ops_test;

// Decode-sized products (1-8 rows, the GPU's one-launch path) and one past it, with k spanning
// several 2048-wide strides plus a tail, n not a multiple of 4, a grouped product and sibling
// products of one x.
TEST_P(BackendOps, SmallBatchMatmul) {
    for (int64_t m : {1, 2, 3, 4, 5, 8, 9}) {
        Tensor x = random_f32({m, 4200}, rng), w = random_bf16({37, 4200}, rng);
        Tensor a = Tensor::empty(DType::kF32, {m, 37}), b = Tensor::empty(DType::kF32, {m, 37});
        cpu->matmul(x, w, a);
        ref->matmul(x, w, b);
        EXPECT_TRUE(all_close(a, b, mm_tol)) << "m = " << m;

        Tensor gx = random_f32({m, 4 * 264}, rng), gw = random_bf16({4 * 8, 264}, rng);
        Tensor ga = Tensor::empty(DType::kF32, {m, 32}), gb = Tensor::empty(DType::kF32, {m, 32});
        cpu->grouped_matmul(gx, gw, 4, ga);
        ref->grouped_matmul(gx, gw, 4, gb);
        EXPECT_TRUE(all_close(ga, gb, mm_tol)) << "grouped, m = " << m;

        std::vector<Tensor> ws, ys;
        for (int64_t n : {37, 12, 64}) ws.push_back(random_bf16({n, 520}, rng)), ys.push_back(Tensor::empty(DType::kF32, {m, n}));
        Tensor xs = random_f32({m, 520}, rng);
        std::vector<MatmulTarget> targets;
        for (size_t i = 0; i < ws.size(); ++i) targets.push_back({&ws[i], &ys[i]});
        cpu->matmul_many(xs, targets);
        for (size_t i = 0; i < ws.size(); ++i) {
            Tensor expect = Tensor::empty(DType::kF32, ys[i].shape());
            ref->matmul(xs, ws[i], expect);
            EXPECT_TRUE(all_close(ys[i], expect, mm_tol)) << "matmul_many product " << i << ", m = " << m;
        }
    }
}

// One activation row under every GEMV variant the backend offers (kernel knobs; the CPU backends
// have none): a short product (block tasks) and a tall one (enough rows for warp tasks).
TEST_P(BackendOps, OneRowMatmulVariants) {
    std::vector<VariantSet> sets = {{}};
    for (int rows : {2, 4})
        for (int unroll : {4, 8})
            sets.push_back({{"gemv_one_row_warp_rows", rows}, {"gemv_one_row_warp_unroll", unroll}});
    for (int rows : {2, 4}) sets.push_back({{"gemv_one_row_block_rows", rows}});
    for (const VariantSet& set : sets) {
        if (!apply_variants(*cpu, set)) continue;
        for (int64_t n : {37, 20000}) {
            int64_t k = n < 100 ? 4200 : 72;
            Tensor x = random_f32({1, k}, rng), w = random_bf16({n, k}, rng);
            Tensor a = Tensor::empty(DType::kF32, {1, n}), b = Tensor::empty(DType::kF32, {1, n});
            cpu->matmul(x, w, a);
            ref->matmul(x, w, b);
            EXPECT_TRUE(all_close(a, b, mm_tol)) << "n = " << n << variant_label(set);
        }
    }
}

// FP8 block-scaled weights as the checkpoint stores them (core/quant_fp8.h), where the backend
// reads them (AVX-512, CUDA): every step size against the reference over the decoded values, and
// steps past the GEMV sizes bit for bit the product over the same weights widened to bf16 (CUDA
// widens the matrix in scratch for those; the CPU decodes rows for the same kernels).
TEST_P(BackendOps, Fp8WeightsAreReadAsStored) {
    apply_variants(*cpu, {{"fp8_weights", 1}});  // CUDA: on, whatever its default
    if (!cpu->reads_fp8()) GTEST_SKIP() << "this backend gets FP8 weights widened at load";
    int64_t n = 72, k = 384;
    Tensor codes = Tensor::empty(DType::kF8E4M3, {n, k}), scales = Tensor::empty(DType::kF32, {(n + 31) / 32, k / 32});
    for (int64_t i = 0; i < codes.numel(); ++i) {
        uint8_t code;
        do code = static_cast<uint8_t>(rng());
        while ((code & 0x7F) == 0x7F);  // not a NaN
        codes.data<uint8_t>()[i] = code;
    }
    for (int64_t i = 0; i < scales.numel(); ++i) scales.data<float>()[i] = std::ldexp(1.0f, -10 + static_cast<int>(rng() % 12));
    Tensor w = fp8::pack(codes, scales, {32, 32}), values = fp8::dequantize(w);
    Tensor wide = Tensor::empty(DType::kBF16, {n, k});
    for (int64_t i = 0; i < values.numel(); ++i) wide.data<uint16_t>()[i] = f32_to_bf16(values.data<float>()[i]);
    for (int64_t m : {1, 3, 8, 9, 40}) {
        Tensor x = random_f32({m, k}, rng);
        Tensor got = Tensor::empty(DType::kF32, {m, n}), want = Tensor::empty(DType::kF32, {m, n});
        Tensor widened = Tensor::empty(DType::kF32, {m, n});
        cpu->matmul(x, w, got);
        ref->matmul(x, values, want);
        EXPECT_TRUE(all_close(got, want, mm_tol)) << "m = " << m;
        if (m <= 8) continue;
        cpu->matmul(x, wide, widened);
        EXPECT_EQ(std::memcmp(got.raw(), widened.raw(), got.nbytes()), 0) << "m = " << m;
    }
    apply_variants(*cpu, {});
}

TEST_P(BackendOps, DenseOps) {
    Tensor x = random_f32({6, 40}, rng), w = random_bf16({12, 40}, rng), nw = random_f32({40}, rng);
    Tensor a = Tensor::empty(DType::kF32, {6, 12}), b = Tensor::empty(DType::kF32, {6, 12});
    cpu->matmul(x, w, a);
    ref->matmul(x, w, b);
    EXPECT_TRUE(all_close(a, b, mm_tol));

    Tensor gw = random_bf16({3 * 7, 10}, rng), gx = random_f32({5, 30}, rng);
    Tensor ga = Tensor::empty(DType::kF32, {5, 21}), gb = Tensor::empty(DType::kF32, {5, 21});
    cpu->grouped_matmul(gx, gw, 3, ga);
    ref->grouped_matmul(gx, gw, 3, gb);
    EXPECT_TRUE(all_close(ga, gb, mm_tol));

    for (const Tensor* weight : {static_cast<const Tensor*>(&nw), static_cast<const Tensor*>(nullptr)}) {
        Tensor na = copy_of(x), nb = copy_of(x);
        cpu->rms_norm(na, weight, 1e-6f, na);
        ref->rms_norm(nb, weight, 1e-6f, nb);
        EXPECT_TRUE(all_close(na, nb, tol));
    }
    for (int64_t cols : {4096, 5000}) {  // the GPU keeps rows of up to 4,096 in registers
        Tensor wide = random_f32({2, cols}, rng), wn = random_f32({cols}, rng), wb = copy_of(wide);
        Tensor wa = Tensor::empty(DType::kF32, {2, cols});
        cpu->rms_norm(wide, &wn, 1e-6f, wa);
        ref->rms_norm(wb, &wn, 1e-6f, wb);
        EXPECT_TRUE(all_close(wa, wb, tol)) << "rms_norm of " << cols << " columns";
    }

    Rope rope{rope_freqs(8, 10000.0f), 8, 1.3f};
    Tensor ra = random_f32({6, 4, 16}, rng), rb = copy_of(ra);
    Tensor pos = positions({0, 3, 17, 250, 1000, 65535});
    for (bool inverse : {false, true}) {
        Tensor va = ra.reshape({24, 16}), vb = rb.reshape({24, 16});
        cpu->rope(va, pos, 4, rope, inverse);
        ref->rope(vb, pos, 4, rope, inverse);
        EXPECT_TRUE(all_close(ra, rb, tol));
    }

    for (const Tensor* weight : {static_cast<const Tensor*>(&nw), static_cast<const Tensor*>(nullptr)}) {
        Tensor xa = random_f32({24, 40}, rng, 2.0f), xb = copy_of(xa);  // 6 positions x 4 heads
        cpu->rms_norm_rope(xa, weight, 1e-6f, pos, 4, rope);
        ref->rms_norm(xb, weight, 1e-6f, xb);
        ref->rope(xb, pos, 4, rope, false);
        EXPECT_TRUE(all_close(xa, xb, tol)) << "rms_norm_rope" << (weight ? " with weight" : "");
    }
    {  // norm_rope_many: a weighted norm, a norm + rope over 4-row groups, a rope alone over 2-row groups
        Tensor wq = random_f32({40}, rng);
        Tensor a0 = random_f32({6, 40}, rng, 2.0f), a1 = random_f32({24, 40}, rng, 2.0f), a2 = random_f32({12, 40}, rng, 2.0f);
        Tensor b0 = copy_of(a0), b1 = copy_of(a1), b2 = copy_of(a2);
        NormRopeJob ja[] = {{&a0, true, &wq, 1e-6f}, {&a1, true, nullptr, 1e-6f, &rope, 4}, {&a2, false, nullptr, 0.0f, &rope, 2}};
        cpu->norm_rope_many(ja, pos);
        ref->rms_norm(b0, &wq, 1e-6f, b0);
        ref->rms_norm_rope(b1, nullptr, 1e-6f, pos, 4, rope);
        ref->rope(b2, pos, 2, rope, false);
        EXPECT_TRUE(all_close(a0, b0, tol) && all_close(a1, b1, tol) && all_close(a2, b2, tol)) << "norm_rope_many";
    }

    {  // add, then copy of the sum into a tensor of another shape (same bytes)
        Tensor xa = random_f32({7, 33}, rng), ya = random_f32({7, 33}, rng), yb = copy_of(ya);
        cpu->add(xa, ya);
        ref->add(xa, yb);
        EXPECT_TRUE(all_close(ya, yb, tol)) << "add";
        Tensor ca = random_f32({33, 7}, rng), cb = random_f32({33, 7}, rng);
        cpu->copy(ya, ca);
        ref->copy(ya, cb);
        EXPECT_EQ(std::memcmp(ca.raw(), ya.raw(), ya.nbytes()), 0) << "copy";
        EXPECT_EQ(std::memcmp(cb.raw(), ya.raw(), ya.nbytes()), 0) << "copy (reference)";
        if (on_host()) {
            Tensor short_dst = Tensor::empty(DType::kF32, {3});
            EXPECT_THROW(cpu->copy(ya, short_dst), deepinfer::Error);
        }
    }

    for (int64_t cols : {7, 1000, 129280}) {  // greedy sampling: ties go to the lower id
        Tensor l = random_f32({4, cols}, rng, 5.0f);
        float* v = l.data<float>();
        v[cols + cols / 2] = v[cols + cols - 1] = 50.0f;  // row 1: two equal maxima
        for (int64_t c = 0; c < cols; ++c) v[2 * cols + c] = -INFINITY;  // row 2: nothing but -inf
        Tensor ia = Tensor::empty(DType::kI32, {4}), ib = Tensor::empty(DType::kI32, {4});
        cpu->argmax_rows(l, ia);
        ref->argmax_rows(l, ib);
        EXPECT_EQ(std::memcmp(ia.raw(), ib.raw(), ia.nbytes()), 0) << "argmax_rows over " << cols;
        EXPECT_EQ(ia.data<int32_t>()[1], cols / 2);
        EXPECT_EQ(ia.data<int32_t>()[2], 0);
    }

    for (int64_t cols : {7, 1000, 129280}) {  // structured output: masked rows, then the greedy pick
        int64_t words = (cols + 31) / 32;
        Tensor l = random_f32({5, cols}, rng, 5.0f), la = copy_of(l), lb = copy_of(l);
        Tensor rows = Tensor::empty(DType::kI32, {3}), mask = Tensor::empty(DType::kI32, {3, words});
        int32_t picked[3] = {4, 1, 2};  // rows 0 and 3 stay as they are
        for (int i = 0; i < 3; ++i) rows.data<int32_t>()[i] = picked[i];
        for (int64_t w = 0; w < 3 * words; ++w) mask.data<int32_t>()[w] = static_cast<int32_t>(rng() & rng());  // ~1/4 allowed
        for (int64_t w = 0; w < words; ++w) mask.data<int32_t>()[2 * words + w] = 0;
        mask.data<int32_t>()[2 * words + (cols - 1) / 32] = static_cast<int32_t>(1u << ((cols - 1) % 32));  // row 2: only the last id
        cpu->apply_token_mask(la, rows, mask);
        ref->apply_token_mask(lb, rows, mask);
        EXPECT_EQ(std::memcmp(la.raw(), lb.raw(), la.nbytes()), 0) << "apply_token_mask over " << cols;
        Tensor ids = Tensor::empty(DType::kI32, {5});
        cpu->argmax_rows(la, ids);
        for (int i = 0; i < 3; ++i) {
            int32_t id = ids.data<int32_t>()[picked[i]];
            uint32_t word = static_cast<uint32_t>(mask.data<int32_t>()[i * words + id / 32]);
            EXPECT_TRUE(word >> (id % 32) & 1u) << "row " << picked[i] << " picked a masked token " << id;
        }
        EXPECT_EQ(ids.data<int32_t>()[2], cols - 1);
        EXPECT_EQ(std::memcmp(la.raw(), l.raw(), cols * sizeof(float)), 0) << "an unlisted row changed";
    }

    Tensor g = random_f32({5, 9}, rng, 3.0f), u = random_f32({5, 9}, rng, 3.0f);
    Tensor sa = Tensor::empty(DType::kF32, {5, 9}), sb = Tensor::empty(DType::kF32, {5, 9});
    cpu->swiglu(g, u, 2.0f, sa);
    ref->swiglu(g, u, 2.0f, sb);
    EXPECT_TRUE(all_close(sa, sb, tol));

    Tensor ids = Tensor::empty(DType::kI32, {4});
    for (int i = 0; i < 4; ++i) ids.data<int32_t>()[i] = static_cast<int32_t>(rng() % 12);
    Tensor ea = Tensor::empty(DType::kF32, {4, 2, 40}), eb = Tensor::empty(DType::kF32, {4, 2, 40});
    Tensor table = random_bf16({12, 40}, rng);
    cpu->embed(ids, table, 2, ea);
    ref->embed(ids, table, 2, eb);
    EXPECT_TRUE(all_close(ea, eb, 0.0));
    ids.data<int32_t>()[2] = 12;  // the device path relies on the model's host-side id check
    if (on_host()) {
        EXPECT_THROW(cpu->embed(ids, table, 2, ea), deepinfer::Error);
    }
    ids.data<int32_t>()[2] = 5;
    Tensor wide_table = random_bf16({12, 4100}, rng);  // more than one chunk of the GPU's row registers
    Tensor wa = Tensor::empty(DType::kF32, {4, 4, 4100}), wb = Tensor::empty(DType::kF32, {4, 4, 4100});
    cpu->embed(ids, wide_table, 4, wa);
    ref->embed(ids, wide_table, 4, wb);
    EXPECT_TRUE(all_close(wa, wb, 0.0)) << "embed of 4,100 columns";
}

// Random streams of n tokens and the mixing parameters of one mHC site.
struct MhcInputs {
    Tensor streams, fn, base, scale;
};

MhcInputs random_mhc_inputs(std::mt19937& rng, int64_t n, int hc, int64_t d) {
    int64_t mix = (2 + hc) * hc;
    return {random_f32({n, hc, d}, rng), random_f32({mix, hc * d}, rng, 0.1f), random_f32({mix}, rng), random_f32({3}, rng)};
}

// Decode-sized steps (the GPU's split-k path, several splits with a tail), a wide step (one GEMM).
// hc 3 takes the GPU's general paths (no fused site, Sinkhorn across lanes).
TEST_P(BackendOps, Mhc) {
    for (int hc : {4, 3}) {
        for (const VariantSet& set : {VariantSet{}, VariantSet{{"hc_site_tagged", 0}}, VariantSet{{"hc_site", 0}}}) {
            if (!apply_variants(*cpu, set)) continue;
            for (auto [n, d] : {std::pair<int64_t, int64_t>{5, 24}, {3, 600}, {70, 40}}) {
                SCOPED_TRACE("hc " + std::to_string(hc) + " n " + std::to_string(n) + " d " + std::to_string(d) +
                             variant_label(set));
                auto [streams, fn, base, scale] = random_mhc_inputs(rng, n, hc, d);
                MhcParams p{hc, 20, 1e-6f, 1e-6f};
                Tensor ca = Tensor::empty(DType::kF32, {n, d}), cb = copy_of(ca);
                Tensor pa = Tensor::empty(DType::kF32, {n, hc}), pb = copy_of(pa);
                Tensor ma = Tensor::empty(DType::kF32, {n, hc, hc}), mb = copy_of(ma);
                cpu->hc_pre(streams, fn, base, scale, p, ca, pa, ma);
                ref->hc_pre(streams, fn, base, scale, p, cb, pb, mb);
                EXPECT_TRUE(all_close(ca, cb, tol));
                EXPECT_TRUE(all_close(pa, pb, tol));
                EXPECT_TRUE(all_close(ma, mb, tol));
                Tensor nw = random_f32({d}, rng), na = copy_of(ca), pn = copy_of(pa), mn = copy_of(ma);
                cpu->hc_pre_norm(streams, fn, base, scale, p, nw, 1e-6f, na, pn, mn);
                ref->rms_norm(cb, &nw, 1e-6f, cb);
                EXPECT_TRUE(all_close(na, cb, tol)) << "hc_pre_norm";
                EXPECT_TRUE(all_close(pn, pb, tol) && all_close(mn, mb, tol)) << "hc_pre_norm coefficients";
                for (int64_t i = 0; i < n; ++i)  // Sinkhorn output is (nearly) doubly stochastic
                    for (int k = 0; k < hc; ++k) {
                        float col = 0;
                        for (int j = 0; j < hc; ++j) col += ma.data<float>()[(i * hc + j) * hc + k];
                        EXPECT_NEAR(col, 1.0f, 1e-4f);
                    }
                Tensor y = random_f32({n, d}, rng), sa = copy_of(streams), sb = copy_of(streams);
                cpu->hc_post(sa, y, pa, ma);
                ref->hc_post(sb, y, pa, ma);
                EXPECT_TRUE(all_close(sa, sb, tol));
                // The stream update fused with the next site's collapse (the GPU's one pass for <= 64 tokens).
                Tensor y2 = random_f32({n, d}, rng), s1 = copy_of(streams), s2 = copy_of(streams);
                Tensor p1 = copy_of(pa), c1 = copy_of(ma), p2 = copy_of(pa), c2 = copy_of(ma);
                Tensor x1 = Tensor::empty(DType::kF32, {n, d}), x2 = copy_of(x1), nw2 = random_f32({d}, rng);
                cpu->hc_post_pre_norm(s1, y2, p1, c1, fn, base, scale, p, nw2, 1e-6f, x1);
                ref->hc_post(s2, y2, p2, c2);
                ref->hc_pre_norm(s2, fn, base, scale, p, nw2, 1e-6f, x2, p2, c2);
                EXPECT_TRUE(all_close(s1, s2, tol)) << "hc_post_pre_norm streams";
                EXPECT_TRUE(all_close(x1, x2, tol)) << "hc_post_pre_norm collapsed";
                EXPECT_TRUE(all_close(p1, p2, tol) && all_close(c1, c2, tol)) << "hc_post_pre_norm coefficients";
                Tensor hfn = random_f32({hc, hc * d}, rng, 0.1f), hbase = random_f32({hc}, rng);
                Tensor hscale = random_f32({1}, rng);
                Tensor ha = Tensor::empty(DType::kF32, {n, d}), hb = copy_of(ha);
                cpu->hc_head(streams, hfn, hbase, hscale, p, ha);
                ref->hc_head(streams, hfn, hbase, hscale, p, hb);
                EXPECT_TRUE(all_close(ha, hb, tol));
            }
        }
    }
}

// Shapes that take each expert path on the GPU: rows that are not whole 16-byte loads (per-expert
// GEMMs), up to 64 (token, slot) pairs (each pair reads its expert), up to 1,024 pairs (grouped by
// expert on the device: on tensor cores, experts with one or two passes of up to 64 pairs and
// row blocks cut short, with four k steps of weights or one in flight; with moe_grouped_mma=0 on
// CUDA cores, passes of eight pairs), and more
// (per-expert GEMMs).
TEST_P(BackendOps, MoeRoutingAndExperts) {
    struct Shape {
        int64_t n, d, inter;
    };
    for (const VariantSet& set : {VariantSet{}, VariantSet{{"moe_up_unroll", 4}, {"moe_down_unroll", 4}},
                                  VariantSet{{"moe_grouped_mma", 0}}, VariantSet{{"moe_mma_steps_in_flight", 1}}}) {
        if (!apply_variants(*cpu, set)) continue;
        for (Shape sh : {Shape{1, 264, 48}, Shape{7, 24, 10}, Shape{5, 264, 48}, Shape{40, 64, 16}, Shape{300, 256, 136},
                         Shape{600, 16, 8}}) {
            SCOPED_TRACE(variant_label(set));
            int64_t n = sh.n, d = sh.d, experts = 6, inter = sh.inter;
            int k = 2;
            Tensor logits = random_f32({n, experts}, rng, 3.0f), bias = random_f32({experts}, rng);
            Tensor tid2eid = Tensor::empty(DType::kI64, {50, k}), tokens = Tensor::empty(DType::kI32, {n});
            for (int64_t i = 0; i < 50 * k; ++i) tid2eid.data<int64_t>()[i] = static_cast<int64_t>(rng() % experts);
            for (int64_t i = 0; i < n; ++i) tokens.data<int32_t>()[i] = static_cast<int32_t>(rng() % 50);
            for (bool hash : {false, true}) {
                Tensor ia = Tensor::empty(DType::kI32, {n, k}), ib = copy_of(ia);
                Tensor wa = Tensor::empty(DType::kF32, {n, k}), wb = copy_of(wa);
                cpu->moe_route(logits, hash ? nullptr : &bias, hash ? &tid2eid : nullptr, &tokens, k, 1.5f, ia, wa);
                ref->moe_route(logits, hash ? nullptr : &bias, hash ? &tid2eid : nullptr, &tokens, k, 1.5f, ib, wb);
                EXPECT_EQ(std::memcmp(ia.raw(), ib.raw(), ia.nbytes()), 0);
                EXPECT_TRUE(all_close(wa, wb, tol));
                std::vector<ExpertWeights> ex;
                for (int64_t e = 0; e < experts; ++e)
                    ex.push_back(
                        {random_bf16({inter, d}, rng), random_bf16({inter, d}, rng), random_bf16({d, inter}, rng)});
                Tensor x = random_f32({n, d}, rng), oa = random_f32({n, d}, rng), ob = copy_of(oa);
                cpu->moe_experts(x, ia, wa, ex, 1.0f, oa);
                ref->moe_experts(x, ia, wa, ex, 1.0f, ob);
                EXPECT_TRUE(all_close(oa, ob, mm_tol)) << "n " << n << " d " << d << " inter " << inter;
                // With the shared expert (the reference: its three matmuls, then the routed experts).
                ExpertWeights shared{random_bf16({inter, d}, rng), random_bf16({inter, d}, rng),
                                     random_bf16({d, inter}, rng)};
                cpu->moe_ffn(x, ia, wa, ex, shared, 1.0f, oa);
                ref->moe_ffn(x, ia, wa, ex, shared, 1.0f, ob);
                EXPECT_TRUE(all_close(oa, ob, mm_tol)) << "moe_ffn, n " << n << " d " << d << " inter " << inter;
            }
        }
    }
}

// The fast precision's routed experts (one bf16 part per activation) on the GPU's grouped paths:
// the tensor-core kernels with weights staged through shared memory (passes of 64 pairs, or with
// moe_staged_wide=1 of 128 when experts average more than 64; row blocks and k chunks cut short) or, with
// moe_staged=0, streamed from memory; 3,000 pairs take the GEMMs, or with moe_staged_max_pairs=8192
// the staged kernels (four passes an expert). Within bf16's rounding of the fp32 reference.
TEST_P(BackendOps, FastPrecisionExperts) {
    if (on_host()) GTEST_SKIP() << "covered by the CPU's fused-op tests";
    cpu->execution().set_matmul_precision(MatmulPrecision::kBf16);
    for (const VariantSet& set :
         {VariantSet{}, VariantSet{{"moe_staged", 0}}, VariantSet{{"moe_staged_wide", 1}},
          VariantSet{{"moe_staged_max_pairs", 8192}, {"moe_staged_wide", 1}}}) {
        if (!apply_variants(*cpu, set)) continue;
        for (auto [n, d, inter] : {std::tuple<int64_t, int64_t, int64_t>{40, 64, 16}, {300, 256, 136}, {200, 520, 72},
                                   {1500, 64, 24}}) {
            SCOPED_TRACE(variant_label(set) + " n " + std::to_string(n) + " d " + std::to_string(d));
            int64_t experts = 6, k = 2;
            Tensor ids = Tensor::empty(DType::kI32, {n, k}), w = random_f32({n, k}, rng);
            for (int64_t i = 0; i < n * k; ++i) ids.data<int32_t>()[i] = static_cast<int32_t>(rng() % experts);
            std::vector<ExpertWeights> ex;
            for (int64_t e = 0; e < experts; ++e)
                ex.push_back({random_bf16({inter, d}, rng), random_bf16({inter, d}, rng), random_bf16({d, inter}, rng)});
            Tensor x = random_f32({n, d}, rng), oa = random_f32({n, d}, rng), ob = copy_of(oa);
            cpu->moe_experts(x, ids, w, ex, 1.0f, oa);
            ref->moe_experts(x, ids, w, ex, 1.0f, ob);
            EXPECT_TRUE(all_close(oa, ob, 2e-2));
        }
    }
}

TEST_P(BackendOps, DelayedMhc) {
    int hc = 4;
    int64_t n = 6, d = 20;
    auto [streams, fn, base, scale] = random_mhc_inputs(rng, n, hc, d);
    MhcParams p{hc, 7, 1e-6f, 1e-20f};
    Tensor pa = Tensor::empty(DType::kF32, {n, hc}), pb = copy_of(pa), qa = copy_of(pa), qb = copy_of(pa);
    Tensor ma = Tensor::empty(DType::kF32, {n, hc, hc}), mb = copy_of(ma);
    cpu->hc_mix(streams, fn, base, scale, p, pa, qa, ma);
    ref->hc_mix(streams, fn, base, scale, p, pb, qb, mb);
    EXPECT_TRUE(all_close(pa, pb, tol));
    EXPECT_TRUE(all_close(qa, qb, tol));
    EXPECT_TRUE(all_close(ma, mb, tol));
    Tensor ca = Tensor::empty(DType::kF32, {n, d}), cb = copy_of(ca);
    cpu->hc_collapse(streams, pa, ca);
    ref->hc_collapse(streams, pa, cb);
    EXPECT_TRUE(all_close(ca, cb, tol));
}

TEST_P(BackendOps, EngramGate) {
    int64_t n = 5, hc = 4, d = 48;
    Tensor streams = random_f32({n, hc, d}, rng), kv = random_f32({n, (hc + 1) * d}, rng), w = random_f32({hc, d}, rng);
    for (int64_t c = 0; c < d; ++c) kv.data<float>()[c] = 0.0f;  // a zero key: the gate's clamp at |t| = 1e-6
    Tensor a = copy_of(streams), b = copy_of(streams);
    cpu->engram_gate(a, kv, w, 1e-6f);
    ref->engram_gate(b, kv, w, 1e-6f);
    EXPECT_TRUE(all_close(a, b, tol));
    EXPECT_FALSE(all_close(a, streams, 1e-3));
}

TEST_P(BackendOps, FakeQuantizeMatchesBruteForceGrid) {
    for (QuantFormat f : {QuantFormat::kFp8Ue8m0x32, QuantFormat::kFp4E4m3x16, QuantFormat::kFp4Ue8m0x32}) {
        Tensor x = random_f32({7, 64}, rng, 3.0f);
        for (int64_t i = 0; i < 32; ++i) x.data<float>()[i] *= 1e-3f;  // a block of small magnitudes
        Tensor a = copy_of(x), b = copy_of(x);
        cpu->fake_quantize(a, f);
        ref->fake_quantize(b, f);
        EXPECT_TRUE(all_close(a, b, 0.0)) << static_cast<int>(f);
        EXPECT_FALSE(all_close(a, x, 1e-7)) << "quantisation changed nothing";
        Tensor odd = random_f32({3, 24}, rng), kept = copy_of(odd);  // 24 is no multiple of the block
        if (f != QuantFormat::kFp4E4m3x16) {
            cpu->fake_quantize(odd, f);
            EXPECT_TRUE(all_close(odd, kept, 0.0));
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendOps, ::testing::Values("scalar", "avx2", "avx512", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace deepinfer::kernels
