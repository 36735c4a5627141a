// Logits parity of the DeepSeek-V4.1 forward against the independent PyTorch reference
// (scripts/v41_reference.py, full forward without a cache) on its random-weight fixtures, for
// every schedule: one prefill, chunked prefill, decode; and for several sequences in one batch.
#include <gtest/gtest.h>

#include "base/error.h"
#include "core/quant_fp8.h"
#include "core/safetensors.h"
#include "kernels/backend.h"
#include "kernels/ref/ref_backend.h"
#include "model/archs/deepseek_v41.h"
#include "model/checkpoint.h"
#include "model/weight_loader.h"
#include "runtime/sequence_logits.h"
#include "tests/model/parity_util.h"

namespace deepinfer {
namespace {

using test::expect_parity;
using test::Fixture;

Fixture load_fixture(const std::string& name) { return test::load_fixture("v41/" + name); }

void expect_all_schedules(kernels::Backend& backend, const Fixture& f, const std::string& what) {
    // Random weights are chaotic: parity needs the exact precision (the default on CUDA is fast).
    model::DeepseekV41Model m(model::load_deepseek_v41_config(f.dir), model::Checkpoint(f.dir), backend,
                              {.precision = model::Precision::kExact});
    test::expect_all_schedules(m, f, what, 3);
}

class V41Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(V41Parity, AllSchedulesMatchReference) {
    auto backend = kernels::make_cpu_backend(0);
    expect_all_schedules(*backend, load_fixture(GetParam()), GetParam());
}

TEST_P(V41Parity, CudaBackendMatchesReference) {
    std::string why;
    auto backend = test::cuda_backend(why);
    if (!backend) GTEST_SKIP() << why;
    expect_all_schedules(*backend, load_fixture(GetParam()), GetParam() + " cuda");
}

TEST_P(V41Parity, ReferenceBackendMatchesReference) {
    Fixture f = load_fixture(GetParam());
    auto backend = kernels::make_reference_backend();
    model::DeepseekV41Model m(f.dir, *backend);
    std::vector<int32_t> head(f.ids.begin(), f.ids.begin() + 40);
    expect_parity(runtime::sequence_logits(m, head, {5, -1}), f.reference.rows(0, 40),
                  GetParam() + " reference backend, chunk 5");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, V41Parity, ::testing::Values("v41_tiny_a", "v41_tiny_b", "v41_release_fp8", "v41_engram"));

// v41_release_fp8 is what the release ships: official names without the "model." prefix, FP8
// e4m3 linears and MXFP4 experts with E8M0 scales, draft tensors under mtp.*.
TEST(V41ReleaseLayout, FixtureHasTheReleaseEncodings) {
    SafetensorsFile f(test::data_path("v41/v41_release_fp8/model.safetensors"));
    auto dtype_of = [&](const std::string& name) { return f.entries().at(name).dtype; };
    EXPECT_EQ(dtype_of("layers.1.attn.wq_a.weight"), DType::kF8E4M3);
    EXPECT_EQ(dtype_of("layers.1.attn.wq_a.scale"), DType::kF8E8M0);
    EXPECT_EQ(dtype_of("layers.2.ffn.experts.3.w2.weight"), DType::kI8);
    EXPECT_EQ(f.entries().at("layers.2.ffn.experts.3.w2.weight").shape, (std::vector<int64_t>{64, 16}));
    EXPECT_EQ(dtype_of("layers.2.ffn.experts.3.w2.scale"), DType::kF8E8M0);
    EXPECT_EQ(dtype_of("embed.weight"), DType::kBF16);
    EXPECT_EQ(dtype_of("head.weight"), DType::kBF16);
    EXPECT_EQ(dtype_of("mtp.0.attn.wq_a.weight"), DType::kF8E4M3);
    EXPECT_FALSE(f.contains("model.embed.weight"));
}

// A backend that reads FP8 gets the release's linears as stored (8 bits and a scale exponent per
// 32 inputs) standing for the values a widening backend gets; the parity above then runs on them.
TEST(V41ReleaseLayout, Fp8LinearsAreKeptForABackendThatReadsThem) {
    model::Checkpoint ckpt(test::data_path("v41/v41_release_fp8"));
    model::WeightLoader kept(ckpt, {32, 32}, model::WeightQuant::kNone, {.fp8 = true}), widening(ckpt, {32, 32});
    for (const char* name : {"layers.1.attn.wq_a.weight", "layers.1.attn.wq_b.weight", "layers.1.attn.wo_b.weight"}) {
        std::vector<int64_t> shape = ckpt.entry(name).shape;
        Tensor packed = kept.linear({name}, shape), wide = widening.linear({name}, shape);
        ASSERT_EQ(packed.dtype(), DType::kFp8) << name;
        ASSERT_EQ(wide.dtype(), DType::kBF16) << name;
        EXPECT_LT(packed.nbytes() * 3, wide.nbytes() * 2) << name;
        Tensor values = fp8::dequantize(packed);
        for (int64_t i = 0; i < values.numel(); ++i)
            ASSERT_EQ(f32_to_bf16(values.data<float>()[i]), wide.data<uint16_t>()[i]) << name << " value " << i;
    }
}

}  // namespace
}  // namespace deepinfer
