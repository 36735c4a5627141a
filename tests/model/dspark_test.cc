// The DSpark draft forward against its PyTorch reference (scripts/dspark_reference.py) on the
// v41_dspark fixture: the target's taps, then at each draft point the block's base logits, the
// Markov-corrected logits and confidences along the greedy draft, and the greedy draft tokens.
// The context is committed chunk by chunk (short of a window, one window, a wrapped ring).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/safetensors.h"
#include "kernels/ref/ref_backend.h"
#include "model/archs/deepseek_v41.h"
#include "model/checkpoint.h"
#include "tests/model/parity_util.h"

namespace deepinfer {
namespace {

struct DraftFixture {
    test::Fixture f;
    Tensor taps, points, base_logits, logits, confidence, tokens;
};

// The checkpoint in `dir` and the reference outputs in `reference` (dspark_reference.py's layout).
DraftFixture load_draft_fixture(const std::string& dir, const std::string& reference) {
    DraftFixture d;
    d.f = test::load_fixture(dir, reference);
    SafetensorsFile ref(reference);
    d.taps = ref.tensor("taps");
    d.points = ref.tensor("draft_points");
    d.base_logits = ref.tensor("draft_base_logits");
    d.logits = ref.tensor("draft_logits");
    d.confidence = ref.tensor("draft_confidence");
    d.tokens = ref.tensor("draft_tokens");
    return d;
}

double max_abs(const float* a, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(a[i])));
    return m;
}

// max |got - want| over n values, relative to max |want|.
double relative_diff(const float* got, const float* want, int64_t n) {
    double d = 0.0;
    for (int64_t i = 0; i < n; ++i) d = std::max(d, std::fabs(static_cast<double>(got[i]) - want[i]));
    return d / std::max(1e-30, max_abs(want, n));
}

Tensor download(kernels::Backend& backend, const Tensor& t) {
    Tensor host = Tensor::empty(DType::kF32, t.shape());
    backend.download(t, host.data<float>());
    return host;
}

DraftFixture fixture_checkpoint() {
    std::string dir = test::data_path("v41/v41_dspark");
    return load_draft_fixture(dir, dir + "/reference.safetensors");
}

void expect_draft_parity(kernels::Backend& backend, const std::string& what, const DraftFixture& d = fixture_checkpoint()) {
    model::DeepseekV41Model m(model::load_deepseek_v41_config(d.f.dir), model::Checkpoint(d.f.dir), backend,
                              {.precision = model::Precision::kExact, .draft = true});  // random weights: exact
    model::DSparkDraft* draft = m.dspark();
    ASSERT_NE(draft, nullptr);
    int64_t V = m.vocab_size(), T1 = draft->drafts_per_block(), total = d.taps.dim(0), width = d.taps.dim(1);
    auto cache = m.make_cache(m.plan_cache_for_tokens(1, total));
    int state = cache->try_add_sequence();
    ASSERT_TRUE(state >= 0 && cache->reserve(state, total));
    draft->allocate(cache->max_seqs());
    int64_t done = 0;
    for (int64_t c = 0; c < d.points.numel(); ++c) {
        int64_t P = d.points.data<int64_t>()[c];
        model::Batch step;
        step.append(d.f.ids, done, static_cast<int32_t>(P - done), state);
        cache->describe(step);
        m.forward(step, *cache);
        model::StepFeatures taps = m.step_features();  // the step's last window of positions
        const kernels::SeqSlice& kept = taps.seqs.at(0);
        EXPECT_EQ(kept.start_pos + kept.num_tokens, P);
        EXPECT_EQ(kept.num_tokens, std::min<int64_t>(P - done, m.config().base.sliding_window));
        Tensor got_taps = download(backend, taps.rows);
        EXPECT_LE(relative_diff(got_taps.data<float>(), d.taps.data<float>() + kept.start_pos * width, kept.num_tokens * width),
                  1e-4)
            << what << ": taps of positions " << kept.start_pos << ".." << P - 1;
        draft->commit(taps.seqs, taps.rows);
        done = P;

        model::DraftAnchor anchor{state, d.f.ids[P], P, 0};
        model::DraftBlock block = draft->forward({&anchor, 1});
        Tensor base = download(backend, block.base_logits);
        double base_diff = relative_diff(base.data<float>(), d.base_logits.data<float>() + c * T1 * V, T1 * V);
        EXPECT_LE(base_diff, 1e-3) << what << ": base logits at draft point " << P;
        int32_t prev = anchor.token;
        for (int64_t k = 0; k < T1; ++k) {
            Tensor row = block.base_logits.rows(k, k + 1), hidden = block.hidden.rows(k, k + 1);
            Tensor e = draft->markov(row, {&prev, 1});
            float conf = draft->confidence(hidden, e)[0];
            Tensor got = download(backend, row);
            const float* want = d.logits.data<float>() + (c * T1 + k) * V;
            EXPECT_LE(relative_diff(got.data<float>(), want, V), 1e-3) << what << ": Markov logits, point " << P << " draft " << k;
            EXPECT_NEAR(conf, d.confidence.data<float>()[c * T1 + k], 1e-3) << what << ": confidence, point " << P << " draft " << k;
            int32_t greedy = static_cast<int32_t>(std::max_element(got.data<float>(), got.data<float>() + V) - got.data<float>());
            prev = static_cast<int32_t>(d.tokens.data<int64_t>()[c * T1 + k]);
            EXPECT_EQ(greedy, prev) << what << ": greedy draft, point " << P << " draft " << k;
        }
        std::printf("%s: draft point %ld, base logits max rel diff %.3g\n", what.c_str(), static_cast<long>(P), base_diff);
    }
}

TEST(DSparkDraft, CpuMatchesReference) {
    auto backend = kernels::make_cpu_backend(0);
    expect_draft_parity(*backend, "cpu");
}

TEST(DSparkDraft, ReferenceBackendMatchesReference) {
    auto backend = kernels::make_reference_backend();
    expect_draft_parity(*backend, "reference backend");
}

TEST(DSparkDraft, CudaMatchesReference) {
    std::string why;
    auto backend = test::cuda_backend(why);
    if (!backend) GTEST_SKIP() << why;
    expect_draft_parity(*backend, "cuda");
}

// Without the draft flag the checkpoint loads as the target alone; a checkpoint without dspark_*
// keys has no draft to load.
TEST(DSparkDraft, LoadedOnlyWhenAskedAndPresent) {
    auto backend = kernels::make_cpu_backend(0);
    model::DeepseekV41Model target(test::data_path("v41/v41_dspark"), *backend);
    EXPECT_EQ(target.dspark(), nullptr);
    std::string plain = test::data_path("v41/v41_tiny_a");
    model::DeepseekV41Model none(model::load_deepseek_v41_config(plain), model::Checkpoint(plain), *backend,
                                 {.precision = model::Precision::kExact, .draft = true});  // random weights: exact
    EXPECT_EQ(none.dspark(), nullptr);
}

}  // namespace
}  // namespace deepinfer
