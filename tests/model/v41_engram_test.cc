// DeepSeek-V4.1 Engram pieces against the reference (scripts/v41_reference.py, whose token map
// uses Python's unicodedata and whose multipliers come from numpy itself): the tokenizer-derived
// token classes, the numpy PCG64 multiplier draw, each position's table rows; and that the
// fixture's logits depend on the Engram layers at all.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "core/safetensors.h"
#include "kernels/backend.h"
#include "model/archs/deepseek_v41.h"
#include "model/config_file.h"
#include "model/engram_hash.h"
#include "runtime/sequence_logits.h"
#include "tests/model/parity_util.h"
#include "tokenizer/engram_token_map.h"

namespace deepinfer {
namespace {

std::string fixture_dir() { return test::data_path("v41/v41_engram"); }

std::vector<int64_t> i64s(const Tensor& t) { return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel()); }

TEST(V41Engram, TokenClassesMatchTheReference) {
    auto tok = tokenizer::Tokenizer::from_dir(fixture_dir());
    tokenizer::EngramTokenMap map = tokenizer::engram_token_map(*tok);
    SafetensorsFile ref(fixture_dir() + "/reference.safetensors");
    std::vector<int64_t> expected = i64s(ref.tensor("engram_token_map"));
    ASSERT_EQ(map.class_of.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(map.class_of[i], expected[i]) << "token " << i;
    EXPECT_LT(map.num_classes, static_cast<int32_t>(expected.size()));  // classes do collapse
    EXPECT_EQ(tokenizer::engram_normalize("  Café\u0301\t\n"), "cafe");
    EXPECT_EQ(tokenizer::engram_normalize(" "), " ");
    EXPECT_EQ(tokenizer::engram_normalize("\uFB01"), "fi");
}

// numpy 1.24: np.random.default_rng(10007 * layer).integers(0, (2**63 - 1) // 99092 // 2, 4, np.int64)
TEST(V41Engram, MultipliersReproduceNumpy) {
    int64_t bound = (INT64_MAX / 99092) / 2;
    EXPECT_EQ(model::numpy_default_rng_integers(10007 * 1, bound, 4),
              (std::vector<int64_t>{38316048023122, 2419938046656, 17979836159674, 36993668729195}));
    EXPECT_EQ(model::numpy_default_rng_integers(10007 * 14, bound, 4),
              (std::vector<int64_t>{33858405369630, 25755403400457, 15460673601360, 41309613242795}));
}

TEST(V41Engram, TableRowsMatchTheReference) {
    model::DeepseekV41Config cfg = model::parse_deepseek_v41_config(model::read_config_json(fixture_dir()));
    auto tok = tokenizer::Tokenizer::from_dir(fixture_dir());
    model::EngramHasher hasher(cfg.engram, tokenizer::engram_token_map(*tok).class_of);
    SafetensorsFile ref(fixture_dir() + "/reference.safetensors");
    std::vector<int64_t> ids = i64s(ref.tensor("input_ids")), expected = i64s(ref.tensor("engram_hash_ids"));
    int span = cfg.engram.max_ngram_size, per_pos = static_cast<int>(cfg.engram.layer_ids.size()) * cfg.engram.columns();
    std::vector<int64_t> got(per_pos);
    for (size_t p = 0; p < ids.size(); ++p) {
        std::vector<int32_t> window(span);
        for (int k = 0; k < span; ++k) window[k] = static_cast<int64_t>(p) - k < 0 ? -1 : static_cast<int32_t>(ids[p - k]);
        hasher.rows(window, got.data());
        EXPECT_EQ(got, std::vector<int64_t>(expected.begin() + p * per_pos, expected.begin() + (p + 1) * per_pos))
            << "position " << p;
    }
}

TEST(V41Engram, FixtureLogitsDependOnEngram) {
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / ("di_no_engram_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    for (const char* f : {"model.safetensors", "tokenizer.json"})
        fs::copy_file(fs::path(fixture_dir()) / f, dir / f, fs::copy_options::overwrite_existing);
    nlohmann::json cfg = model::read_config_json(fixture_dir());
    cfg["text_config"]["engram_layer_ids"] = nlohmann::json::array();
    std::ofstream(dir / "config.json") << cfg.dump();
    test::Fixture f = test::load_fixture("v41/v41_engram");
    auto backend = kernels::make_cpu_backend(2);
    model::DeepseekV41Model without(dir.string(), *backend);
    Tensor got = runtime::sequence_logits(without, f.ids, {});
    double diff = 0.0;
    for (int64_t i = 0; i < got.numel(); ++i)
        diff = std::max(diff, std::fabs(static_cast<double>(got.data<float>()[i]) - f.reference.data<float>()[i]));
    EXPECT_GT(diff, 0.1) << "the Engram layers barely change the fixture's logits";
    fs::remove_all(dir);
}

TEST(V41Engram, MissingLookBackIsAnError) {
    auto backend = kernels::make_cpu_backend(2);
    model::DeepseekV41Model m(fixture_dir(), *backend);
    auto cache = m.make_cache(m.plan_cache_for_tokens(1, 64, 8));
    int state = cache->try_add_sequence();
    cache->reserve(state, 20);
    model::Batch b;
    b.token_ids = {5, 6, 7};
    b.seqs.push_back({0, 3, 10, state});  // starts at position 10 without its context tokens
    b.logit_rows = {2};
    EXPECT_THROW(m.forward(b, *cache), Error);
}

}  // namespace
}  // namespace deepinfer
