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
#include "runtime/sequence_logits.h"
#include "tests/test_util.h"

namespace deepinfer {
namespace {

std::string nano_dir() { return std::string(DEEPINFER_SOURCE_DIR) + "/models/deepinfer-nano"; }

TEST(DeepinferNano, PerplexityEqualsHfWithinOnePercent) {
    SafetensorsFile heldout(test::data_path("nano_heldout.safetensors"));
    Tensor ids = heldout.tensor("input_ids"), hf_nll = heldout.tensor("hf_mean_nll");  // [N, L+1], [N]
    auto backend = kernels::make_cpu_backend(0);
    model::DeepseekV4Model m(nano_dir(), *backend);
    int64_t n = ids.dim(0), len = ids.dim(1) - 1, vocab = m.config().vocab_size;
    double ours = 0, theirs = 0, worst = 0;
    for (int64_t s = 0; s < n; ++s) {
        const int64_t* row = ids.data<int64_t>() + s * (len + 1);
        std::vector<int32_t> x(row, row + len);
        Tensor logits = runtime::sequence_logits(m, x, {});
        double nll = 0;
        for (int64_t t = 0; t < len; ++t) {
            const float* l = logits.data<float>() + t * vocab;
            double mx = *std::max_element(l, l + vocab), z = 0;
            for (int64_t v = 0; v < vocab; ++v) z += std::exp(l[v] - mx);
            nll += mx + std::log(z) - l[row[t + 1]];
        }
        nll /= len;
        worst = std::max(worst, std::fabs(nll - hf_nll.data<float>()[s]));
        ours += nll / n;
        theirs += hf_nll.data<float>()[s] / n;
    }
    double ppl = std::exp(ours), hf_ppl = std::exp(theirs);
    std::printf("held-out perplexity: deepinfer %.4f, HF %.4f (ratio %.6f); worst per-sequence NLL gap %.2e\n", ppl, hf_ppl,
                ppl / hf_ppl, worst);
    EXPECT_NEAR(ppl / hf_ppl, 1.0, 0.01);
    EXPECT_LT(worst, 1e-3);
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
