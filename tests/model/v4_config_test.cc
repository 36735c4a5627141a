// Config parsing agrees with how transformers parsed the same config.json (the fixtures carry
// HF's parsed config as hf_config.json and HF's rope inverse frequencies in hf_rope.safetensors).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "core/safetensors.h"
#include "model/archs/deepseek_v4.h"
#include "model/rope_freqs.h"
#include "tests/test_util.h"

namespace deepinfer::model {
namespace {

nlohmann::json read(const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
}

class V4Config : public ::testing::TestWithParam<std::string> {};

TEST_P(V4Config, ParsesLikeTransformers) {
    std::string dir = test::data_path("v4/" + GetParam());
    DeepseekV4Config ours = load_deepseek_v4_config(dir);
    nlohmann::json hf = read(dir + "/hf_config.json");
    ASSERT_EQ(ours.layer_types.size(), hf["layer_types"].size());
    for (size_t i = 0; i < ours.layer_types.size(); ++i)
        EXPECT_EQ(attention_type_name(ours.layer_types[i]), hf["layer_types"][i].get<std::string>());
    for (size_t i = 0; i < ours.mlp_layer_types.size(); ++i)
        EXPECT_EQ(ours.mlp_layer_types[i] == MlpType::kHashMoe ? "hash_moe" : "moe", hf["mlp_layer_types"][i].get<std::string>());
    EXPECT_EQ(ours.compress_rate_csa, hf["compress_rates"]["compressed_sparse_attention"].get<int>());
    EXPECT_EQ(ours.compress_rate_hca, hf["compress_rates"]["heavily_compressed_attention"].get<int>());
    EXPECT_EQ(ours.rope_dim, static_cast<int>(hf["head_dim"].get<int>() * hf["partial_rotary_factor"].get<double>()));
    EXPECT_EQ(ours.rope_compress.type, hf["rope_parameters"]["compress"]["rope_type"].get<std::string>());

    SafetensorsFile hf_rope(dir + "/hf_rope.safetensors");
    for (auto [name, rope] : {std::pair{"main", ours.rope_main}, std::pair{"compress", ours.rope_compress}}) {
        std::vector<float> inv = rope_inv_freq(rope, ours.rope_dim);
        Tensor expected = hf_rope.tensor(std::string("inv_freq.") + name);
        ASSERT_EQ(static_cast<int64_t>(inv.size()), expected.numel());
        for (size_t i = 0; i < inv.size(); ++i)
            EXPECT_NEAR(inv[i], expected.data<float>()[i], 1e-6 * expected.data<float>()[i]) << name << " " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, V4Config, ::testing::Values("v4_tiny_a", "v4_tiny_b", "v4_tiny_legacy_fp8"));

TEST(V4ConfigErrors, RejectsWhatItCannotRun) {
    auto base = read(test::data_path("v4/v4_tiny_a/config.json"));
    auto expect_error = [&](nlohmann::json j, const std::string& needle) {
        try {
            parse_deepseek_v4_config(j);
            ADD_FAILURE() << "no error, expected: " << needle;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    auto j = base;
    j["model_type"] = "llama";
    expect_error(j, "unsupported model_type 'llama'");
    j = base;
    j["scoring_func"] = "softmax";
    expect_error(j, "scoring_func");
    j = base;
    j["layer_types"].push_back("sliding_attention");
    j["num_hidden_layers"] = 7;
    expect_error(j, "layer types for 7 layers");
    j = base;
    j["hidden_size"] = "big";
    expect_error(j, "'hidden_size' has the wrong type");
    j = base;
    j["rope_parameters"]["compress"]["rope_type"] = "longrope";
    expect_error(j, "rope type 'longrope' is not supported");
}

TEST(V4ConfigErrors, LegacyDefaultsFollowTransformers) {
    nlohmann::json j = {{"model_type", "deepseek_v4"}, {"num_hidden_layers", 5}};
    DeepseekV4Config c = parse_deepseek_v4_config(j);
    // No layer_types / compress_ratios: two HCA layers, then HCA/CSA interleaved.
    std::vector<AttentionType> expect = {AttentionType::kHca, AttentionType::kHca, AttentionType::kHca, AttentionType::kCsa,
                                         AttentionType::kHca};
    EXPECT_EQ(c.layer_types, expect);
    EXPECT_EQ(c.mlp_layer_types[2], MlpType::kHashMoe);
    EXPECT_EQ(c.mlp_layer_types[3], MlpType::kMoe);
    EXPECT_EQ(c.rope_dim, 64);
}

}  // namespace
}  // namespace deepinfer::model
