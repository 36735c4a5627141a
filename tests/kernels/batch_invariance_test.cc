// Batch invariance (Backend::set_batch_invariant, what deterministic requests run on): a row's
// product, a token's routed experts and its attention come out with the same bits whatever batch they are
// computed in (its size, the row's place in it), in every matmul precision, and still equal the
// reference backend's result to the usual tolerance. On CUDA the same sweep with the mode off
// finds rows that change (GEMV for a few rows, cuBLAS above, per-pair and grouped MoE kernels,
// split-key and tiled attention),
// which shows that the comparison can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "base/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/ref/ref_backend.h"
#include "tests/kernels/mirror_backend.h"
#include "tests/test_util.h"

namespace deepinfer::kernels {
namespace {

using test::all_close;
using test::random_bf16;
using test::random_f32;

constexpr int64_t kBatches[] = {2, 5, 8, 9, 16, 17, 40, 130};

class BatchInvariance : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        ref = make_reference_backend();
        if (GetParam() == "cuda") {
            std::string why;
            dev = testing::mirrored_cuda_backend(why);
            if (!dev) GTEST_SKIP() << why;
        } else {
            dev = cpu::make_cpu_backend(2, detect_isa());
        }
        seed = test::random_seed();
        rng.seed(seed);
    }

    bool row_equal(const Tensor& a, int64_t i, const Tensor& b, int64_t j) const {
        int64_t width = a.numel() / a.dim(0);
        return std::memcmp(a.data<float>() + i * width, b.data<float>() + j * width, width * sizeof(float)) == 0;
    }

    // Rows of x in a batch of `m` random rows with probe row p of `probes` at a random place.
    // Returns the batch and where each probe sits.
    std::pair<Tensor, std::vector<int64_t>> batch_with(const Tensor& probes, int64_t m) {
        int64_t k = probes.dim(1), count = std::min(m, probes.dim(0));
        Tensor x = random_f32({m, k}, rng);
        std::vector<int64_t> place(static_cast<size_t>(m));
        std::iota(place.begin(), place.end(), 0);
        std::shuffle(place.begin(), place.end(), rng);
        place.resize(static_cast<size_t>(count));
        for (int64_t p = 0; p < count; ++p)
            std::memcpy(x.data<float>() + place[p] * k, probes.data<float>() + p * k, k * sizeof(float));
        return {x, place};
    }

    // How many (batch, probe) rows of x · wᵀ differ from the probe computed alone.
    int changed_rows(const Tensor& w, const Tensor& probes, double tol = 1e-4) {
        int64_t n = w.dim(0), k = w.dim(1);
        std::vector<Tensor> alone;
        for (int64_t p = 0; p < probes.dim(0); ++p) {
            Tensor x = Tensor::empty(DType::kF32, {1, k}), y = Tensor::empty(DType::kF32, {1, n});
            std::memcpy(x.raw(), probes.data<float>() + p * k, k * sizeof(float));
            dev->matmul(x, w, y);
            Tensor expect = Tensor::empty(DType::kF32, {1, n});
            ref->matmul(x, w, expect);
            EXPECT_TRUE(all_close(y, expect, tol)) << "probe " << p;
            alone.push_back(y);
        }
        int changed = 0;
        for (int64_t m : kBatches) {
            auto [x, place] = batch_with(probes, m);
            Tensor y = Tensor::empty(DType::kF32, {m, n});
            dev->matmul(x, w, y);
            for (size_t p = 0; p < place.size(); ++p) changed += !row_equal(alone[p], 0, y, place[p]);
        }
        return changed;
    }

    std::unique_ptr<Backend> dev, ref;
    uint32_t seed = 0;
    std::mt19937 rng;
};

struct Product {
    int64_t n, k;
    bool bf16;
};
constexpr Product kProducts[] = {{37, 4200, true}, {300, 520, true}, {24, 1030, true}, {24, 1040, false}, {7, 61, false}};

TEST_P(BatchInvariance, AProductRowHasTheSameBitsInAnyBatch) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ASSERT_TRUE(dev->execution().set_batch_invariant(true));
    for (MatmulPrecision precision : {MatmulPrecision::kBf16x2, MatmulPrecision::kFp32, MatmulPrecision::kBf16}) {
        dev->execution().set_matmul_precision(precision);
        for (const Product& p : kProducts) {
            SCOPED_TRACE("n " + std::to_string(p.n) + " k " + std::to_string(p.k) + " precision " +
                         std::to_string(static_cast<int>(precision)));
            Tensor w = p.bf16 ? random_bf16({p.n, p.k}, rng) : random_f32({p.n, p.k}, rng);
            // The reference multiplies in fp32; the fast precision rounds activations to bf16.
            double tol = precision == MatmulPrecision::kBf16 && p.bf16 ? 1e-2 : 1e-4;
            EXPECT_EQ(changed_rows(w, random_f32({3, p.k}, rng), tol), 0);
        }
    }
}

// Sibling products of one x (matmul_many) and a grouped product (grouped_matmul), which split x
// once for all their products.
TEST_P(BatchInvariance, SiblingAndGroupedProductRowsHaveTheSameBitsInAnyBatch) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ASSERT_TRUE(dev->execution().set_batch_invariant(true));
    int64_t k = 264, groups = 4;
    Tensor w1 = random_bf16({40, k}, rng), w2 = random_bf16({24, k}, rng), gw = random_bf16({groups * 12, k}, rng);
    auto products = [&](const Tensor& x) {
        int64_t m = x.dim(0);
        std::vector<Tensor> y{Tensor::empty(DType::kF32, {m, 40}), Tensor::empty(DType::kF32, {m, 24})};
        std::vector<MatmulTarget> targets{{&w1, &y[0]}, {&w2, &y[1]}};
        dev->matmul_many(x, targets);
        return y;
    };
    auto grouped = [&](const Tensor& x) {  // rows of groups * k
        Tensor y = Tensor::empty(DType::kF32, {x.dim(0), groups * 12});
        dev->grouped_matmul(x, gw, static_cast<int>(groups), y);
        return y;
    };
    Tensor probe = random_f32({1, k}, rng), gprobe = random_f32({1, groups * k}, rng);
    auto alone = products(probe);
    Tensor galone = grouped(gprobe);
    for (int64_t m : kBatches) {
        auto [x, place] = batch_with(probe, m);
        auto y = products(x);
        EXPECT_TRUE(row_equal(alone[0], 0, y[0], place[0]) && row_equal(alone[1], 0, y[1], place[0])) << m << " rows";
        auto [gx, gplace] = batch_with(gprobe, m);
        EXPECT_TRUE(row_equal(galone, 0, grouped(gx), gplace[0])) << "grouped, " << m << " rows";
    }
}

// The routed experts and the shared expert of a token: its output row alone, then among other
// tokens (a few: the decode paths; hundreds: the prefill paths).
TEST_P(BatchInvariance, ATokensExpertsHaveTheSameBitsInAnyBatch) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ASSERT_TRUE(dev->execution().set_batch_invariant(true));
    int64_t d = 264, inter = 48, experts = 8, top_k = 3;
    std::vector<ExpertWeights> ex;
    for (int64_t e = 0; e < experts; ++e)
        ex.push_back({random_bf16({inter, d}, rng), random_bf16({inter, d}, rng), random_bf16({d, inter}, rng)});
    ExpertWeights shared{random_bf16({inter, d}, rng), random_bf16({inter, d}, rng), random_bf16({d, inter}, rng)};
    auto routing = [&](int64_t n) {
        Tensor ids = Tensor::empty(DType::kI32, {n, top_k}), w = random_f32({n, top_k}, rng);
        for (int64_t i = 0; i < n * top_k; ++i) ids.data<int32_t>()[i] = static_cast<int32_t>(rng() % experts);
        return std::pair{ids, w};
    };
    for (bool with_shared : {false, true}) {
        SCOPED_TRACE(with_shared ? "moe_ffn" : "moe_experts");
        auto run = [&](Backend& b, const Tensor& x, const Tensor& ids, const Tensor& w) {
            Tensor out = Tensor::zeros(DType::kF32, {x.dim(0), d});
            if (with_shared) b.moe_ffn(x, ids, w, ex, shared, 1.0f, out);
            else b.moe_experts(x, ids, w, ex, 1.0f, out);
            return out;
        };
        Tensor probe = random_f32({1, d}, rng);
        auto [ids1, w1] = routing(1);
        Tensor alone = run(*dev, probe, ids1, w1);
        EXPECT_TRUE(all_close(alone, run(*ref, probe, ids1, w1), 1e-4));
        for (int64_t n : {2, 7, 20, 30, 400}) {
            auto [x, place] = batch_with(probe, n);
            auto [ids, w] = routing(n);
            if (n == 20)  // skewed: one expert holds more rows than the average tile
                for (int64_t i = 0; i < n; ++i) ids.data<int32_t>()[i * top_k] = 0;
            for (int64_t s = 0; s < top_k; ++s) {
                ids.data<int32_t>()[place[0] * top_k + s] = ids1.data<int32_t>()[s];
                w.data<float>()[place[0] * top_k + s] = w1.data<float>()[s];
            }
            Tensor got = run(*dev, x, ids, w);
            EXPECT_TRUE(row_equal(alone, 0, got, place[0])) << n << " tokens";
            EXPECT_TRUE(all_close(got, run(*ref, x, ids, w), 1e-4)) << n << " tokens";
        }
    }
}

// A decoding token's attention (its window from the ring, the indexer's picks among paged
// compressed entries) as one row of a step that may also prefill another sequence.
class AttentionProbe {
public:
    static constexpr int64_t kHeads = 16, kDim = 128, kPos = 300, kMostOthers = 400;
    static constexpr int kWindow = 32, kRate = 4, kPicks = 24, kBlock = 8;

    explicit AttentionProbe(std::mt19937& rng) : rng_(rng) {
        q_ = random_f32({1, kHeads, kDim}, rng), kv_ = random_f32({1, kDim}, rng);
        ring_ = random_f32({2, kWindow - 1, kDim}, rng), sinks_ = random_f32({kHeads}, rng);
        int32_t probe_blocks = ((kPos + 1) / kRate + kBlock - 1) / kBlock, other_blocks = kMostOthers / kRate / kBlock + 1;
        pool_ = random_f32({probe_blocks + other_blocks, kBlock, kDim}, rng);
        for (int32_t b = probe_blocks + other_blocks - 1; b >= 0; --b)  // scattered: tables run backwards
            (b < probe_blocks ? probe_table_ : other_table_).push_back(b);
        for (int i = 0; i < kPicks; ++i) picks_.push_back(static_cast<int32_t>(rng() % ((kPos + 1) / kRate)));
    }

    // The probe's output row of a step that also prefills `others` tokens (0: none) of another
    // sequence, placed before or after the probe.
    Tensor row(Backend& b, int64_t others, bool probe_first, AttentionArgs::Compressed mode) {
        int64_t n = 1 + others, at = probe_first ? 0 : others;
        std::vector<SeqSlice> seqs{{static_cast<int32_t>(at), 1, kPos, 0}};
        std::vector<std::span<const int32_t>> tables{probe_table_};
        if (others > 0) {
            auto where = probe_first ? seqs.end() : seqs.begin();
            tables.insert(probe_first ? tables.end() : tables.begin(), other_table_);
            seqs.insert(where, {probe_first ? 1 : 0, static_cast<int32_t>(others), 0, 1});
        }
        EntryStore store{pool_, tables};
        AttentionArgs a;
        a.q = random_f32({n, kHeads, kDim}, rng_), a.kv = random_f32({n, kDim}, rng_);
        std::memcpy(a.q.data<float>() + at * kHeads * kDim, q_.raw(), q_.nbytes());
        std::memcpy(a.kv.data<float>() + at * kDim, kv_.raw(), kv_.nbytes());
        a.ring = ring_, a.window = kWindow, a.compressed = mode, a.entries = &store, a.rate = kRate;
        a.sinks = sinks_, a.scale = 0.1f;
        a.selected = Tensor::empty(DType::kI32, {n, kPicks});
        for (int64_t r = 0, t = 0; r < n; ++r) {
            int32_t* sel = a.selected.data<int32_t>() + r * kPicks;
            int64_t visible = r == at ? 0 : (t++ + 1) / kRate;
            for (int i = 0; i < kPicks; ++i) sel[i] = r == at ? picks_[i] : i < visible ? static_cast<int32_t>(rng_() % visible) : -1;
        }
        a.out = Tensor::empty(DType::kF32, {n, kHeads, kDim});
        b.attention(seqs, a);
        Tensor out = Tensor::empty(DType::kF32, {1, kHeads, kDim});
        std::memcpy(out.raw(), a.out.data<float>() + at * kHeads * kDim, out.nbytes());
        return out;
    }

    // How many steps (others x placement) change the probe's row from its row alone.
    int changed_rows(Backend& b, AttentionArgs::Compressed mode) {
        Tensor alone = row(b, 0, true, mode);
        int changed = 0;
        for (int64_t others : {1, 7, 40, 300})
            for (bool first : {true, false})
                changed += std::memcmp(alone.raw(), row(b, others, first, mode).raw(), alone.nbytes()) != 0;
        return changed;
    }

private:
    std::mt19937& rng_;
    Tensor q_, kv_, ring_, sinks_, pool_;
    std::vector<int32_t> probe_table_, other_table_, picks_;
};

// The probe alone, then beside prefills of 1 to 300 tokens: by default a lone token takes the
// split-key decode kernel and a long step the tiled kernel; in the mode every step the tiled one.
TEST_P(BatchInvariance, ATokensAttentionHasTheSameBitsInAnyBatch) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ASSERT_TRUE(dev->execution().set_batch_invariant(true));
    AttentionProbe probe(rng);
    for (auto mode : {AttentionArgs::Compressed::kNone, AttentionArgs::Compressed::kSelected}) {
        EXPECT_TRUE(all_close(probe.row(*dev, 40, false, mode), probe.row(*ref, 40, false, mode), 1e-4));
        EXPECT_EQ(probe.changed_rows(*dev, mode), 0) << "compressed mode " << static_cast<int>(mode);
    }
}

// The comparison can fail: CUDA's default kernels change a row's bits with the batch.
TEST_P(BatchInvariance, WithoutTheModeCudaRowsChangeWithTheBatch) {
    if (GetParam() != "cuda") GTEST_SKIP() << "the CPU kernels are batch-invariant in every mode";
    SCOPED_TRACE("seed " + std::to_string(seed));
    dev->execution().set_batch_invariant(false);
    int changed = 0;
    for (const Product& p : kProducts) {
        Tensor w = p.bf16 ? random_bf16({p.n, p.k}, rng) : random_f32({p.n, p.k}, rng);
        changed += changed_rows(w, random_f32({3, p.k}, rng));
    }
    EXPECT_GT(changed, 0);
    AttentionProbe probe(rng);
    EXPECT_GT(probe.changed_rows(*dev, AttentionArgs::Compressed::kSelected), 0) << "attention";
}

INSTANTIATE_TEST_SUITE_P(Backends, BatchInvariance, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace deepinfer::kernels
