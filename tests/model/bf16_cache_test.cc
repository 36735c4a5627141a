// The fast precision's bf16 KV cache (Backend::reads_bf16_cache) on the V4 and V4.1 fixtures:
// rings and entry pools take half the bytes, and every schedule (one prefill, chunks, decode)
// still gives the same logits bit for bit: the step's own keys are rounded as the cache stores
// them. Its accuracy is judged on a trained model (DeepinferNano.FastPrecisionKeepsPerplexityWithinHalfPercent):
// these random fixtures are chaotic, so bf16 and fp32 logits part ways on them.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/causal_lm.h"
#include "runtime/sequence_logits.h"
#include "tests/model/parity_util.h"
#include "tests/test_util.h"

namespace deepinfer {
namespace {

class Bf16Cache : public ::testing::TestWithParam<std::string> {};

std::unique_ptr<model::CausalLm> load(const std::string& dir, kernels::Backend& backend, model::Precision p) {
    return model::load_causal_lm(dir, backend, {model::WeightQuant::kNone, p});
}

std::map<std::string, int64_t> bytes_by_kind(model::CausalLm& m) {
    auto cache = m.make_cache(m.plan_cache_for_tokens(2, 256));
    std::map<std::string, int64_t> out;
    for (const auto& [kind, bytes] : cache->bytes_by_kind()) out[kind] = bytes;
    return out;
}

TEST_P(Bf16Cache, FastPrecisionHalvesTheRingsAndEntries) {
    auto backend = kernels::make_cpu_backend(0);
    test::Fixture f = test::load_fixture(GetParam());
    auto exact = load(f.dir, *backend, model::Precision::kExact), fast = load(f.dir, *backend, model::Precision::kFast);
    auto full = bytes_by_kind(*exact), half = bytes_by_kind(*fast);
    ASSERT_EQ(full.size(), half.size());
    int halved = 0;
    for (const auto& [kind, bytes] : full) {
        bool kv = kind == "swa_rings" || kind.ends_with("_entries");
        EXPECT_EQ(half[kind], kv ? bytes / 2 : bytes) << kind;
        halved += kv;
    }
    EXPECT_GE(halved, 2) << "rings and at least one entry pool";
}

// On every instruction set (AVX-512 reads bf16 keys in place, the others gather them widened).
TEST_P(Bf16Cache, EveryScheduleGivesTheSameBits) {
    test::Fixture f = test::load_fixture(GetParam());
    std::vector<int32_t> ids(f.ids.begin(), f.ids.begin() + std::min<size_t>(f.ids.size(), 48));
    for (Isa isa : test::supported_isas()) {
        SCOPED_TRACE(isa_name(isa));
        auto backend = kernels::cpu::make_cpu_backend(0, isa);
        auto m = load(f.dir, *backend, model::Precision::kFast);
        Tensor once = runtime::sequence_logits(*m, ids, {});
        for (runtime::LogitsSchedule s : {runtime::LogitsSchedule{5, -1}, runtime::LogitsSchedule{0, 7}}) {
            Tensor other = runtime::sequence_logits(*m, ids, s);
            EXPECT_EQ(std::memcmp(once.raw(), other.raw(), once.nbytes()), 0)
                << "chunk " << s.chunk << " decode from " << s.decode_from;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Bf16Cache, ::testing::Values("v4/v4_tiny_a", "v41/v41_tiny_a", "v41/v41_release_fp8"),
                         [](const auto& info) { return info.param.substr(info.param.find('/') + 1); });

}  // namespace
}  // namespace deepinfer
