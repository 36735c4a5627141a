// DeepSeek-V4.1 config parsing: the fixtures' composite config (text_config), the released
// defaults, the derived layer roles and cache layout, and clear errors for layouts the forward
// cannot run.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "model/archs/deepseek_v41.h"
#include "tests/test_util.h"

namespace deepinfer::model {
namespace {

nlohmann::json fixture_config() {
    std::ifstream in(test::data_path("v41/v41_tiny_a/config.json"));
    return nlohmann::json::parse(in);
}

TEST(V41Config, FixtureRolesAndCacheLayout) {
    DeepseekV41Config c = parse_deepseek_v41_config(fixture_config());
    EXPECT_EQ(c.base.num_hidden_layers, 9);
    EXPECT_EQ(c.compress_ratios.size(), 9u);  // the trailing draft-layer ratio is dropped
    EXPECT_FALSE(c.base.has_hc_head);
    EXPECT_EQ(c.kv_source_of, (std::vector<int>{-1, 1, 1, 3, 3, 5, 5, 5, 5}));
    EXPECT_TRUE(c.uses_candidates(7));
    EXPECT_FALSE(c.uses_candidates(5));
    CacheLayout layout = v41_cache_layout(c);
    EXPECT_EQ(layout.rates[0], 2);
    EXPECT_EQ(layout.rates[1], 1);
    EXPECT_EQ(layout.layers[3].group, 0);
    EXPECT_EQ(layout.layers[5].group, 1);
    EXPECT_EQ(layout.layers[4].group, -1);  // a consumer owns no entries
    EXPECT_EQ(layout.layers[1].carry[0], 2);
    EXPECT_EQ(layout.layers[5].carry[0], 0);  // ratio 1 keeps no unpooled tokens
}

TEST(V41Config, ReleasedDefaults) {
    nlohmann::json j = {{"model_type", "deepseek_v41"}, {"text_config", nlohmann::json::object()}};
    DeepseekV41Config c = parse_deepseek_v41_config(j);
    EXPECT_EQ(c.base.num_hidden_layers, 40);
    EXPECT_EQ(c.kv_source_layer_ids, (std::vector<int>{2, 8, 14, 20}));
    EXPECT_EQ(c.candidate_source_layer_id, 20);
    EXPECT_EQ(c.compress_ratios[1], 0);
    EXPECT_EQ(c.compress_ratios[19], 2);
    EXPECT_EQ(c.compress_ratios[39], 1);
    EXPECT_EQ(c.kv_source_of[39], 20);
}

TEST(V41Config, RejectsWhatItCannotRun) {
    auto expect_error = [](const std::function<void(nlohmann::json&)>& edit, const std::string& needle) {
        nlohmann::json j = fixture_config();
        edit(j["text_config"]);
        try {
            parse_deepseek_v41_config(j);
            ADD_FAILURE() << "accepted: " << needle;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_error([](auto& t) { t["engram_layer_ids"] = {1}; }, "Engram");
    expect_error([](auto& t) { t["kv_source_layer_ids"] = {0, 3, 5}; }, "no compressed branch");
    expect_error([](auto& t) { t["compress_ratios"][2] = 1; }, "reuses KV source");
    expect_error([](auto& t) { t["index_source_layer_ids"] = {1, 3, 7}; }, "is not an index source");
    expect_error([](auto& t) { t["candidate_source_layer_id"] = 3; }, "not the candidate source's");
    expect_error([](auto& t) { t["gate_temp"] = 0.0; }, "gate_temp");
    expect_error([](auto& t) { t["compress_ratios"] = {0, 2}; }, "compress_ratios");
}

}  // namespace
}  // namespace deepinfer::model
