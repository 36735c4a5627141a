// The bundled model, deepinfer-nano: our engine's perplexity on the held-out sequences equals HF
// transformers' (fp32 full forward on the shipped weights, computed at training time) within 1%,
// and greedy generation reproduces HF's greedy sample token for token.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "deepinfer/engine.h"
#include "kernels/backend.h"
#include "model/archs/deepseek_v4.h"
#include "model/archs/step_inputs.h"
#include "runtime/sequence_logits.h"
#include "tests/test_util.h"

namespace deepinfer {
namespace {

std::string nano_dir() { return std::string(DEEPINFER_SOURCE_DIR) + "/models/deepinfer-nano"; }

struct HeldOutScore {
    double ppl = 0, hf_ppl = 0, worst_nll_gap = 0;
    double top1_agreement = 0;  // with `reference_argmax` when given
    std::vector<int32_t> argmax;
};

// Perplexity over the held-out sequences against HF's per-sequence NLL (computed at training time).
HeldOutScore score_held_out(model::LoadOptions options, const std::vector<int32_t>* reference_argmax = nullptr) {
    SafetensorsFile heldout(test::data_path("nano_heldout.safetensors"));
    Tensor ids = heldout.tensor("input_ids"), hf_nll = heldout.tensor("hf_mean_nll");  // [N, L+1], [N]
    auto backend = kernels::make_backend(test::device(), 0);
    model::DeepseekV4Model m(model::load_deepseek_v4_config(nano_dir()), model::Checkpoint(nano_dir()), *backend, options);
    int64_t n = ids.dim(0), len = ids.dim(1) - 1, vocab = m.config().vocab_size;
    HeldOutScore out;
    double ours = 0, theirs = 0, agree = 0;
    for (int64_t s = 0; s < n; ++s) {
        const int64_t* row = ids.data<int64_t>() + s * (len + 1);
        std::vector<int32_t> x(row, row + len);
        Tensor logits = runtime::sequence_logits(m, x, {});
        double nll = 0;
        for (int64_t t = 0; t < len; ++t) {
            const float* l = logits.data<float>() + t * vocab;
            const float* top = std::max_element(l, l + vocab);
            double mx = *top, z = 0;
            for (int64_t v = 0; v < vocab; ++v) z += std::exp(l[v] - mx);
            nll += mx + std::log(z) - l[row[t + 1]];
            out.argmax.push_back(static_cast<int32_t>(top - l));
            if (reference_argmax) agree += (*reference_argmax)[out.argmax.size() - 1] == out.argmax.back();
        }
        nll /= len;
        out.worst_nll_gap = std::max(out.worst_nll_gap, std::fabs(nll - hf_nll.data<float>()[s]));
        ours += nll / n;
        theirs += hf_nll.data<float>()[s] / n;
    }
    out.ppl = std::exp(ours);
    out.hf_ppl = std::exp(theirs);
    out.top1_agreement = agree / static_cast<double>(out.argmax.size());
    return out;
}

TEST(DeepinferNano, PerplexityEqualsHfWithinOnePercent) {
    HeldOutScore s = score_held_out({model::WeightQuant::kNone, model::Precision::kExact});
    std::printf("held-out perplexity: deepinfer %.4f, HF %.4f (ratio %.6f); worst per-sequence NLL gap %.2e\n", s.ppl,
                s.hf_ppl, s.ppl / s.hf_ppl, s.worst_nll_gap);
    EXPECT_NEAR(s.ppl / s.hf_ppl, 1.0, 0.01);
    EXPECT_LT(s.worst_nll_gap, 1e-3);
}

// 8-bit weights (and activations) cost accuracy; llama.cpp's Q8_0 is known to stay within a few
// tenths of a percent of the float perplexity, and ours must too.
TEST(DeepinferNano, Q8WeightsKeepPerplexityWithinOnePercent) {
    if (test::device() != "cpu") GTEST_SKIP() << "q8 weights are a CPU format";
    HeldOutScore exact = score_held_out({model::WeightQuant::kNone, model::Precision::kExact});
    HeldOutScore q8 = score_held_out({model::WeightQuant::kQ8}, &exact.argmax);
    std::printf("held-out perplexity with q8 weights: %.4f (HF fp32 %.4f, ratio %.6f); top-1 agreement with the "
                "unquantized model %.4f\n",
                q8.ppl, q8.hf_ppl, q8.ppl / q8.hf_ppl, q8.top1_agreement);
    EXPECT_NEAR(q8.ppl / q8.hf_ppl, 1.0, 0.01);
    EXPECT_GT(q8.top1_agreement, 0.95);
}

// The fast precision rounds every matrix product's activations to bf16 (as production engines
// run such models); on the trained model that must stay within 0.5% of the fp32 perplexity.
TEST(DeepinferNano, FastPrecisionKeepsPerplexityWithinHalfPercent) {
    HeldOutScore exact = score_held_out({model::WeightQuant::kNone, model::Precision::kExact});
    HeldOutScore fast = score_held_out({model::WeightQuant::kNone, model::Precision::kFast}, &exact.argmax);
    std::printf("held-out perplexity in the fast precision: %.4f (exact %.4f, HF fp32 %.4f, ratio to HF %.6f); top-1 "
                "agreement with exact %.4f\n",
                fast.ppl, exact.ppl, fast.hf_ppl, fast.ppl / fast.hf_ppl, fast.top1_agreement);
    EXPECT_NEAR(fast.ppl / fast.hf_ppl, 1.0, 0.005);
    EXPECT_GT(fast.top1_agreement, 0.97);
    EXPECT_NE(fast.ppl, exact.ppl) << "the fast precision changed nothing: is it on?";
}

TEST(DeepinferNano, GreedySampleEqualsHf) {
    nlohmann::json report = nlohmann::json::parse(std::ifstream(nano_dir() + "/training_report.json"));
    std::vector<int32_t> expected = report["sample_greedy_ids"].get<std::vector<int32_t>>();
    EngineConfig c;
    c.model.path = nano_dir();
    c.cache.memory_bytes = 64 << 20;
    c.cache.max_sequences = 4;
    auto e = Engine::create(c);
    std::vector<int32_t> prompt = e->tokenize(report["sample_prompt"].get<std::string>(), true);
    ASSERT_EQ(prompt, std::vector<int32_t>(expected.begin(), expected.begin() + prompt.size()));  // same tokenization
    GenerationRequest r;
    r.prompt_tokens = prompt;
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = static_cast<int>(expected.size() - prompt.size());
    auto stream = e->submit(r);
    std::vector<int32_t> got = prompt;
    while (auto ev = stream->next())
        for (const auto& s : ev->sequences) got.insert(got.end(), s.tokens.begin(), s.tokens.end());
    EXPECT_EQ(got, expected);
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// The bundled model's MTP head (mtp.0, trained with it) run as our draft model: teacher-forced on
// the held-out sequences (the target's last-layer streams at t and the true token t + 1), its
// argmax hits token t + 2 as often as HF's forward of the same head measured at training time
// (training_report.json), to within a few near-ties. Logits of chosen rows only (what drafting
// asks for) are those rows of the full head's.
TEST(DeepinferNano, MtpHeadAccuracyEqualsHf) {
    nlohmann::json report = nlohmann::json::parse(std::ifstream(nano_dir() + "/training_report.json"));
    double hf_accuracy = report.at("mtp_next_next_token_accuracy").get<double>();
    SafetensorsFile heldout(test::data_path("nano_heldout.safetensors"));
    Tensor ids = heldout.tensor("input_ids");  // [N, L+1]
    auto backend = kernels::make_backend(test::device(), 0);
    model::DeepseekV4Model m(model::load_deepseek_v4_config(nano_dir()), model::Checkpoint(nano_dir()), *backend,
                             {.precision = model::Precision::kExact, .draft = true});  // HF's accuracy was fp32's
    ASSERT_NE(m.draft_model(), nullptr);
    int64_t n = ids.dim(0), len = ids.dim(1) - 1, vocab = m.config().vocab_size, hits = 0, total = 0;
    // In chunks of one window, as the engine commits (a step's features cover its last window).
    const int64_t chunk = m.config().sliding_window;
    for (int64_t s = 0; s < n; ++s) {
        const int64_t* row = ids.data<int64_t>() + s * (len + 1);
        std::vector<int32_t> x(row, row + len);
        auto cache = m.make_cache(m.plan_cache_for_tokens(1, len));
        int state = cache->try_add_sequence();
        ASSERT_TRUE(state >= 0 && cache->reserve(state, len));
        for (int64_t at = 0; at < len; at += chunk) {
            int32_t count = static_cast<int32_t>(std::min(chunk, len - at));
            model::Batch step;
            step.append(x, at, count, state);
            cache->describe(step);
            m.forward(step, *cache);
            model::StepFeatures f = m.step_features();
            ASSERT_EQ(f.seqs.at(0).num_tokens, count);
            int32_t heads_count = static_cast<int32_t>(std::min<int64_t>(count, len - 1 - at));  // each with the token after it
            if (heads_count <= 0) break;
            model::Batch heads;
            heads.append(x, at + 1, heads_count, state);
            heads.seqs.back().start_pos = at;
            Tensor streams = f.rows.rows(0, heads_count).reshape({heads_count, m.config().hc_mult, m.config().hidden_size});
            Tensor logits = m.mtp_forward(heads, streams, dynamic_cast<model::HybridCache&>(*cache));
            std::vector<float> host(static_cast<size_t>(heads_count) * vocab);
            backend->download(logits, host.data());
            if (s == 0 && at == 0) {  // logits of two rows' block streams only (as drafting asks)
                std::vector<int32_t> picked = {heads_count - 1, heads_count / 3};
                Tensor rows = backend->empty(DType::kF32, {2, m.config().hc_mult, m.config().hidden_size});
                backend->gather_rows(streams, model::upload_i32(picked, *backend), rows);
                std::vector<float> some(2 * static_cast<size_t>(vocab));
                backend->download(m.mtp_logits(rows), some.data());
                for (size_t k = 0; k < picked.size(); ++k)
                    for (int64_t v = 0; v < vocab; ++v)
                        ASSERT_NEAR(some[k * vocab + v], host[picked[k] * vocab + v], 1e-4)  // a GPU GEMM may tile 2 rows differently
                            << "row " << picked[k] << " id " << v;
            }
            for (int64_t t = 0; t < heads_count; ++t) {
                const float* l = host.data() + t * vocab;
                hits += std::max_element(l, l + vocab) - l == row[at + t + 2];
                ++total;
            }
        }
    }
    double accuracy = static_cast<double>(hits) / static_cast<double>(total);
    std::printf("MTP next-next-token accuracy %.5f over %ld tokens (HF at training: %.5f)\n", accuracy,
                static_cast<long>(total), hf_accuracy);
    EXPECT_NEAR(accuracy, hf_accuracy, 2e-3);
}

}  // namespace
}  // namespace deepinfer
