// Logits parity of the DeepSeek-V4 forward against HF transformers' full forward (use_cache=False)
// on the random-weight fixtures, for every schedule: one prefill, chunked prefill, decode.
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "kernels/backend.h"
#include "kernels/ref/ref_backend.h"
#include "model/archs/deepseek_v4.h"
#include "runtime/sequence_logits.h"
#include "tests/model/parity_util.h"
#include "tests/test_util.h"

namespace deepinfer {
namespace {

using test::expect_parity;
using test::Fixture;

Fixture load_fixture(const std::string& name) { return test::load_fixture("v4/" + name); }

class V4Parity : public ::testing::TestWithParam<std::string> {};

// Random weights are chaotic: parity needs the exact precision (the default on CUDA is fast).
model::DeepseekV4Model exact_model(const Fixture& f, kernels::Backend& backend) {
    return model::DeepseekV4Model(model::load_deepseek_v4_config(f.dir), model::Checkpoint(f.dir), backend,
                                  {.precision = model::Precision::kExact});
}

void expect_all_schedules(kernels::Backend& backend, const Fixture& f, const std::string& what) {
    model::DeepseekV4Model m = exact_model(f, backend);
    test::expect_all_schedules(m, f, what, 64);
}

TEST_P(V4Parity, AllSchedulesMatchHfFullForward) {
    auto backend = kernels::make_cpu_backend(0);
    expect_all_schedules(*backend, load_fixture(GetParam()), GetParam());
}

TEST_P(V4Parity, CudaBackendMatchesHf) {
    std::string why;
    auto backend = test::cuda_backend(why);
    if (!backend) GTEST_SKIP() << why;
    expect_all_schedules(*backend, load_fixture(GetParam()), GetParam() + " cuda");
}

// Steps of few tokens run as CUDA graph segments (recorded, then replayed with new arguments):
// the same kernels on the same inputs, so the logits equal eager launches bit for bit.
TEST_P(V4Parity, CudaGraphStepsEqualEagerLaunches) {
    std::string why;
    auto backend = test::cuda_backend(why);
    if (!backend) GTEST_SKIP() << why;
    Fixture f = load_fixture(GetParam());
    model::DeepseekV4Model m = exact_model(f, *backend);
    for (int64_t chunk : {0, 64, 7, 16}) {  // 16 after 64: a recording of another shape must not be reused
        runtime::LogitsSchedule schedule{chunk, chunk == 0 ? 0 : -1};
        backend->execution().set_graphs(false);
        Tensor eager = runtime::sequence_logits(m, f.ids, schedule);
        expect_parity(eager, f.reference, GetParam() + " cuda eager chunk " + std::to_string(chunk));
        backend->execution().set_graphs(true);
        Tensor graphed = runtime::sequence_logits(m, f.ids, schedule);
        ASSERT_EQ(graphed.numel(), eager.numel());
        int64_t differ = 0;
        for (int64_t i = 0; i < eager.numel(); ++i) differ += graphed.data<float>()[i] != eager.data<float>()[i];
        EXPECT_EQ(differ, 0) << GetParam() << " chunk " << chunk;
    }
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
