// The automaton operations the compiler relies on, against direct checks on random strings:
// products (intersection / difference), counted repetition, enclosing, and the keys-except-names
// automaton against the product it replaces.
#include <gtest/gtest.h>

#include <random>

#include "grammar/encoding.h"
#include "grammar/json_keys.h"
#include "grammar/pda.h"
#include "grammar/regex.h"

namespace deepinfer::grammar {
namespace {

Dfa regex_dfa(const std::string& pattern) {
    Grammar g;
    return regular_dfa(g, lower_regex(g, parse_regex(pattern), CharEncoding::kUtf8, RegexMatch::kWhole));
}

std::string random_string(std::mt19937& rng, const std::string& alphabet, size_t max_len) {
    std::string s;
    for (size_t n = rng() % (max_len + 1); n > 0; --n) s += alphabet[rng() % alphabet.size()];
    return s;
}

TEST(Automata, ProductsAgreeWithBothOperands) {
    std::mt19937 rng(1);
    Dfa a = regex_dfa("[ab]*a[ab]{0,3}"), b = regex_dfa("(ab|b)*");
    Dfa both = dfa_product(a, b, DfaProduct::kIntersection), only_a = dfa_product(a, b, DfaProduct::kDifference);
    for (int i = 0; i < 5000; ++i) {
        std::string s = random_string(rng, "abc", 9);
        ASSERT_EQ(both.matches(s), a.matches(s) && b.matches(s)) << s;
        ASSERT_EQ(only_a.matches(s), a.matches(s) && !b.matches(s)) << s;
    }
}

TEST(Automata, MinimizeKeepsTheLanguageAndShrinks) {
    std::mt19937 rng(4);
    Grammar g;
    // Two spellings of the same language, unioned: the subset construction keeps redundant states.
    Dfa big = regular_dfa(g, g.alt({lower_regex(g, parse_regex("(ab|a)(ba|b)*c?"), CharEncoding::kUtf8, RegexMatch::kWhole),
                                    lower_regex(g, parse_regex("a(ba|b)*(ab)?c?|ab(b|ab)*c?"), CharEncoding::kUtf8, RegexMatch::kWhole)}));
    Dfa small = dfa_minimize(big);
    EXPECT_LT(small.num_states(), big.num_states());
    for (int i = 0; i < 5000; ++i) {
        std::string s = random_string(rng, "abc", 10);
        ASSERT_EQ(small.matches(s), big.matches(s)) << s;
    }
}

TEST(Automata, RepeatCountsWords) {
    std::mt19937 rng(2);
    Grammar g;
    Dfa unit = regular_dfa(g, utf8_class(g, CodepointSet::all()));  // one UTF-8 character
    for (auto [min, max] : {std::pair{0, 0}, {2, 5}, {3, -1}, {0, 1}}) {
        Dfa counted = dfa_repeat(unit, min, max);
        for (int i = 0; i < 3000; ++i) {
            std::string s = random_string(rng, "a\xC3\xA9\xE4\xBD\xA0", 12);  // bytes of a, é, 你 (and broken pieces)
            size_t pos = 0;
            uint32_t c = 0;
            int64_t chars = 0;
            bool valid = true;
            while (pos < s.size() && (valid = decode_utf8(s, pos, c))) ++chars;
            bool expected = valid && chars >= min && (max < 0 || chars <= max);
            ASSERT_EQ(counted.matches(s), expected) << min << ".." << max << " on " << s;
        }
    }
}

TEST(Automata, EncloseAddsDelimiters) {
    Dfa content = regex_dfa("x+");
    auto quoted = dfa_enclose(content, '<', '>');
    ASSERT_TRUE(quoted.has_value());
    EXPECT_TRUE(quoted->matches("<x>"));
    EXPECT_TRUE(quoted->matches("<xxx>"));
    EXPECT_FALSE(quoted->matches("<>"));
    EXPECT_FALSE(quoted->matches("x"));
    EXPECT_FALSE(quoted->matches("<x>>"));
    EXPECT_FALSE(dfa_enclose(regex_dfa("x>?"), '<', '>').has_value());  // '>' may continue the content
}

TEST(Automata, KeysExceptNamesMatchesTheProduct) {
    std::mt19937 rng(3);
    Grammar g;
    Dfa key_char = regular_dfa(g, encode_class(g, CodepointSet::all(), CharEncoding::kJsonMinimal));
    std::vector<std::string> names{"a", "ab", "abc", "b", "é", "你好", ""};
    auto direct = keys_except(key_char, names);
    ASSERT_TRUE(direct.has_value());
    std::vector<ExprId> quoted;
    for (const auto& n : names) quoted.push_back(g.seq({g.byte('"'), encode_string(g, n, CharEncoding::kJsonMinimal), g.byte('"')}));
    ExprId any_key = g.seq({g.byte('"'), g.star(encode_class(g, CodepointSet::all(), CharEncoding::kJsonMinimal)), g.byte('"')});
    Dfa product = dfa_product(regular_dfa(g, any_key), regular_dfa(g, g.alt(quoted)), DfaProduct::kDifference);
    int accepted = 0;
    for (int i = 0; i < 20000; ++i) {
        std::string s = "\"" + random_string(rng, "abc\"\\n\xC3\xA9\xE4\xBD\xA0\xE5\xA5\xBD", 5) + (rng() % 8 ? "\"" : "");
        ASSERT_EQ(direct->matches(s), product.matches(s)) << s;
        accepted += product.matches(s);
    }
    EXPECT_GT(accepted, 1000);
    EXPECT_FALSE(keys_except(key_char, {"quote\"d"}).has_value());  // several spellings: not built directly
}

}  // namespace
}  // namespace deepinfer::grammar
