// Logits parity of the DeepSeek-V4 forward against HF transformers' full forward (use_cache=False)
// on the random-weight fixtures, for every schedule: one prefill, chunked prefill, decode.
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "core/safetensors.h"
#include "kernels/backend.h"
#include "kernels/ref/ref_backend.h"
#include "model/archs/deepseek_v4.h"
#include "runtime/sequence_logits.h"
#include "tests/test_util.h"

namespace deepinfer {
namespace {

struct Fixture {
    std::string dir;
    std::vector<int32_t> ids;
    Tensor reference;  // [L, V]
};

Fixture load_fixture(const std::string& name) {
    Fixture f;
    f.dir = test::data_path("v4/" + name);
    SafetensorsFile ref(f.dir + "/reference.safetensors");
    Tensor ids = ref.tensor("input_ids");
    for (int64_t i = 0; i < ids.numel(); ++i) f.ids.push_back(static_cast<int32_t>(ids.data<int64_t>()[i]));
    f.reference = ref.tensor("logits");
    return f;
}

// The bar: max |Δ| <= 2e-2 * max |ref| and argmax equal at >= 99.5% of positions.
void expect_parity(const Tensor& got, const Tensor& ref, const std::string& what) {
    int64_t rows = ref.dim(0), vocab = ref.dim(1);
    double max_ref = 0.0, max_diff = 0.0;
    int64_t same_argmax = 0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* g = got.data<float>() + r * vocab;
        const float* e = ref.data<float>() + r * vocab;
        int64_t ag = 0, ae = 0;
        for (int64_t v = 0; v < vocab; ++v) {
            max_ref = std::max(max_ref, std::fabs(static_cast<double>(e[v])));
            max_diff = std::max(max_diff, std::fabs(static_cast<double>(g[v]) - e[v]));
            if (g[v] > g[ag]) ag = v;
            if (e[v] > e[ae]) ae = v;
        }
        same_argmax += ag == ae;
    }
    EXPECT_LE(max_diff, 2e-2 * max_ref) << what;
    EXPECT_GE(static_cast<double>(same_argmax) / rows, 0.995) << what;
    // Far tighter than the bar: fp32 compute on the same bf16 weights should agree to ~1e-5 (the CUDA
    // GEMMs too: they split activations into two bf16 halves). Rounding activations to bf16 alone
    // moves these random-weight fixtures' logits by up to 30% of max|ref|.
    EXPECT_LE(max_diff, 1e-3 * max_ref) << what << " (tight bound)";
    std::printf("%s: max|diff| %.3g (max|ref| %.3g), argmax equal %ld/%ld\n", what.c_str(), max_diff, max_ref,
                static_cast<long>(same_argmax), static_cast<long>(rows));
}

class V4Parity : public ::testing::TestWithParam<std::string> {};

void expect_all_schedules(kernels::Backend& backend, const Fixture& f, const std::string& what) {
    model::DeepseekV4Model m(f.dir, backend);
    std::vector<std::pair<std::string, runtime::LogitsSchedule>> schedules = {
        {"full", {}}, {"chunk 1", {1, -1}}, {"chunk 7", {7, -1}}, {"chunk 16", {16, -1}}, {"chunk 64", {64, -1}},
        {"decode-from 0", {0, 0}}, {"decode-from 37", {0, 37}},
    };
    for (const auto& [name, schedule] : schedules)
        expect_parity(runtime::sequence_logits(m, f.ids, schedule), f.reference, what + " " + name);
}

TEST_P(V4Parity, AllSchedulesMatchHfFullForward) {
    auto backend = kernels::make_cpu_backend(0);
    expect_all_schedules(*backend, load_fixture(GetParam()), GetParam());
}

TEST_P(V4Parity, CudaBackendMatchesHf) {
    std::unique_ptr<kernels::Backend> backend;
    try {
        backend = kernels::make_backend("cuda");
    } catch (const Error& e) {
        GTEST_SKIP() << e.what();
    }
    expect_all_schedules(*backend, load_fixture(GetParam()), GetParam() + " cuda");
}

TEST_P(V4Parity, ReferenceBackendMatchesHf) {
    Fixture f = load_fixture(GetParam());
    auto backend = kernels::make_reference_backend();
    model::DeepseekV4Model m(f.dir, *backend);
    std::vector<int32_t> head(f.ids.begin(), f.ids.begin() + 48);
    Tensor got = runtime::sequence_logits(m, head, {5, -1});
    expect_parity(got, f.reference.rows(0, 48), GetParam() + " reference backend, chunk 5");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, V4Parity, ::testing::Values("v4_tiny_a", "v4_tiny_b", "v4_tiny_legacy_fp8"));

}  // namespace
}  // namespace deepinfer
