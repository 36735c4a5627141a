// The kernel knobs' table (deepinfer/kernel_config.h): every knob names its own field, takes the
// values it lists and no other, and the CLI form parses strictly.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "deepinfer/kernel_config.h"

namespace deepinfer {
namespace {

struct KnobInfo {
    std::string name;
    std::vector<int> allowed;  // the listed choices, or a range's two ends
    bool range = false;
};

// The knobs as kernel_knob_help() lists them: "name (a|b)" or "name (lo..hi)".
std::vector<KnobInfo> listed_knobs() {
    std::vector<KnobInfo> knobs;
    std::regex form(R"((\w+) \((-?\d+)(\.\.|\|)(-?\d+)((?:\|-?\d+)*)\))"), number(R"(-?\d+)");
    for (const std::string& line : kernel_knob_help()) {
        std::smatch m;
        EXPECT_TRUE(std::regex_match(line, m, form)) << line;
        if (m.empty()) continue;
        KnobInfo k{m[1], {std::stoi(m[2]), std::stoi(m[4])}, m[3] == ".."};
        std::string more = m[5];
        for (std::sregex_iterator it(more.begin(), more.end(), number), end; it != end; ++it)
            k.allowed.push_back(std::stoi(it->str()));
        knobs.push_back(k);
    }
    return knobs;
}

TEST(KernelConfig, DefaultsAreInRange) { EXPECT_EQ(kernel_config_error(KernelConfig{}), ""); }

TEST(KernelConfig, EveryKnobSetsItsOwnField) {
    std::vector<KnobInfo> knobs = listed_knobs();
    ASSERT_GE(knobs.size(), 20u);
    std::vector<KernelConfig> changed;
    for (const KnobInfo& k : knobs) {
        // A value other than the default: one of the listed ends moves it.
        KernelConfig a, b;
        ASSERT_TRUE(set_kernel_knob(a, k.name, k.allowed.front())) << k.name;
        ASSERT_TRUE(set_kernel_knob(b, k.name, k.allowed.back())) << k.name;
        KernelConfig moved = a == KernelConfig{} ? b : a;
        EXPECT_NE(moved, KernelConfig{}) << k.name << " changed no field";
        for (const KernelConfig& other : changed) EXPECT_NE(moved, other) << k.name << " sets another knob's field";
        changed.push_back(moved);
        EXPECT_EQ(kernel_config_error(moved), "") << k.name;
    }
}

TEST(KernelConfig, ValuesOutsideAKnobsListAreRefused) {
    for (const KnobInfo& k : listed_knobs()) {
        KernelConfig c;
        std::string why;
        int below = k.allowed.front() - 1, above = k.allowed.back() + 1;
        EXPECT_FALSE(set_kernel_knob(c, k.name, below, &why)) << k.name;
        EXPECT_NE(why.find(k.name), std::string::npos) << why;
        EXPECT_FALSE(set_kernel_knob(c, k.name, above)) << k.name;
        if (!k.range && k.allowed.size() == 2 && k.allowed[1] - k.allowed[0] > 1)  // between two choices
            EXPECT_FALSE(set_kernel_knob(c, k.name, k.allowed[0] + 1)) << k.name;
        EXPECT_EQ(c, KernelConfig{}) << k.name << ": a refused value was stored";
    }
}

TEST(KernelConfig, TheCliFormParsesStrictly) {
    KernelConfig c;
    std::string why;
    EXPECT_TRUE(parse_kernel_knob(c, "moe_staged_max_pairs=4096", &why)) << why;
    EXPECT_EQ(c.cuda.moe_staged_max_pairs, 4096);
    EXPECT_TRUE(parse_kernel_knob(c, "attention_mma=0", &why)) << why;
    EXPECT_FALSE(c.cuda.attention_mma);
    for (const char* bad : {"attention_mma", "attention_mma=", "attention_mma=1x", "=1", "attention_mma=0.5",
                            "no_such_knob=1", "attention_mma=2"}) {
        KernelConfig before = c;
        EXPECT_FALSE(parse_kernel_knob(c, bad, &why)) << bad;
        EXPECT_FALSE(why.empty()) << bad;
        EXPECT_EQ(c, before) << bad;
    }
}

TEST(KernelConfig, AFieldOutOfRangeIsNamed) {
    KernelConfig c;
    c.cuda.attention_decode_splits = 33;
    EXPECT_NE(kernel_config_error(c).find("attention_decode_splits"), std::string::npos) << kernel_config_error(c);
    c = {};
    c.cuda.gemv_one_row_warp_rows = 3;
    EXPECT_NE(kernel_config_error(c).find("gemv_one_row_warp_rows"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer
