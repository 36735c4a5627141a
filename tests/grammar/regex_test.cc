// The regex front-end: whole-match and search semantics against PCRE2 (an independent engine) on
// random patterns and strings, Unicode classes and escapes, and errors that name the offset.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <gtest/gtest.h>

#include <random>

#include "grammar/regex.h"
#include "conformance_util.h"
#include "grammar_test_util.h"

namespace deepinfer::grammar::test {
namespace {

std::shared_ptr<const CompiledGrammar> regex_grammar(std::string_view pattern, RegexMatch match) {
    Grammar g;
    int32_t root = g.add_rule("root");
    g.set_rule_body(root, lower_regex(g, parse_regex(pattern), CharEncoding::kUtf8, match));
    g.set_root(root);
    GrammarCompiler compiler(byte_vocabulary());
    return must_compile(compiler.compile_grammar(g));
}

// PCRE2 as the reference: UTF mode, `$` only at the very end, whole match or search.
class Pcre2 {
public:
    Pcre2(const std::string& pattern, bool whole) {
        int error = 0;
        PCRE2_SIZE offset = 0;
        uint32_t options = PCRE2_UTF | PCRE2_ALT_BSUX | PCRE2_DOLLAR_ENDONLY | (whole ? PCRE2_ANCHORED | PCRE2_ENDANCHORED : 0);
        code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
        data_ = code_ ? pcre2_match_data_create_from_pattern(code_, nullptr) : nullptr;
    }
    ~Pcre2() {
        if (data_) pcre2_match_data_free(data_);
        if (code_) pcre2_code_free(code_);
    }
    bool ok() const { return code_ != nullptr; }
    bool matches(const std::string& text) const {
        return pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, data_, nullptr) >= 0;
    }

private:
    pcre2_code* code_ = nullptr;
    pcre2_match_data* data_ = nullptr;
};

// Random patterns over a small alphabet (where ECMA-262 and PCRE2 agree): literals, classes,
// groups, alternation and every quantifier form.
std::string random_pattern(std::mt19937& rng, int depth) {
    static const char* kAtoms[] = {"a", "b", "c", "[ab]", "[^a]", "\\d", "\\w", ".", "[a-c1]", "é", "\\u00e9", "[^\\s]"};
    std::string out;
    int items = 1 + rng() % 3;
    for (int i = 0; i < items; ++i) {
        std::string atom = depth > 0 && rng() % 4 == 0 ? "(" + random_pattern(rng, depth - 1) + ")" : kAtoms[rng() % 12];
        static const char* kQuantifiers[] = {"", "", "*", "+", "?", "{2}", "{1,3}", "{0,}", "*?"};
        out += atom + kQuantifiers[rng() % 9];
    }
    if (depth > 0 && rng() % 3 == 0) out += "|" + random_pattern(rng, depth - 1);
    return out;
}

std::string random_text(std::mt19937& rng) {
    static const char* kPieces[] = {"a", "b", "c", "1", " ", "é", "\n", "ab", "aa"};
    std::string out;
    int n = rng() % 7;
    for (int i = 0; i < n; ++i) out += kPieces[rng() % 9];
    return out;
}

TEST(Regex, MatchesWholeStrings) {
    auto g = regex_grammar("a[bc]*d|x{2,3}", RegexMatch::kWhole);
    EXPECT_TRUE(accepts_text(g, "ad"));
    EXPECT_TRUE(accepts_text(g, "abcbcd"));
    EXPECT_TRUE(accepts_text(g, "xxx"));
    EXPECT_FALSE(accepts_text(g, "xxxx"));
    EXPECT_FALSE(accepts_text(g, "abd "));
    EXPECT_FALSE(accepts_text(g, "a"));
}

TEST(Regex, AgreesWithPcre2OnRandomPatternsAndStrings) {
    std::mt19937 rng(20261203);
    int compared = 0;
    for (int iter = 0; iter < 300; ++iter) {
        std::string pattern = random_pattern(rng, 2);
        bool whole = iter % 2 == 0;
        std::string anchored = !whole && rng() % 3 == 0 ? "^" + pattern + "$" : pattern;
        Pcre2 reference(anchored, whole);
        ASSERT_TRUE(reference.ok()) << anchored;
        auto g = regex_grammar(anchored, whole ? RegexMatch::kWhole : RegexMatch::kSearch);
        for (int k = 0; k < 40; ++k) {
            std::string text = random_text(rng);
            ASSERT_EQ(accepts_text(g, text), reference.matches(text)) << "pattern " << anchored << " text '" << text << "'";
            ++compared;
        }
    }
    EXPECT_EQ(compared, 300 * 40);
}

TEST(Regex, RandomOutputsOverTheDeepSeekVocabularyMatchPcre2) {
    std::mt19937 rng(31);
    GrammarCompiler compiler(deepseek_vocabulary());
    int outputs = 0;
    for (int iter = 0; iter < 60; ++iter) {
        std::string pattern = random_pattern(rng, 2);
        Pcre2 reference(pattern, true);
        auto g = must_compile(compiler.compile_regex(pattern));
        for (int k = 0; k < 3; ++k)
            if (auto text = random_output(g, rng, 4, 40)) {
                ASSERT_TRUE(reference.matches(*text)) << "pattern " << pattern << " output '" << *text << "'";
                ++outputs;
            }
    }
    EXPECT_GT(outputs, 100);
}

TEST(Regex, UnicodeClassesAndEscapes) {
    auto greek = regex_grammar("[α-ω]+\\u0021", RegexMatch::kWhole);
    EXPECT_TRUE(accepts_text(greek, "λόγος!") == false);  // ό is outside α-ω
    EXPECT_TRUE(accepts_text(greek, "λογος!"));
    auto emoji = regex_grammar("\\ud83d\\ude00|\\u{1F601}", RegexMatch::kWhole);
    EXPECT_TRUE(accepts_text(emoji, "😀"));
    EXPECT_TRUE(accepts_text(emoji, "😁"));
    EXPECT_FALSE(accepts_text(emoji, "\xF0\x9F\x98"));
    auto dot = regex_grammar(".", RegexMatch::kWhole);
    EXPECT_TRUE(accepts_text(dot, "你"));
    EXPECT_FALSE(accepts_text(dot, "\n"));
    EXPECT_FALSE(accepts_text(dot, "\xE2\x80\xA8"));  // U+2028 is a line terminator in ECMA-262
    EXPECT_FALSE(accepts_text(dot, "\xED\xA0\x80"));  // an encoded surrogate is not UTF-8
}

TEST(Regex, ErrorsNameTheOffset) {
    GrammarCompiler compiler(byte_vocabulary());
    struct Case {
        const char* pattern;
        const char* message;
    };
    for (const Case& c : {Case{"ab(c", "bad regex at offset 4: missing ')'"},
                          Case{"a\\1", "bad regex at offset 1: backreferences are not supported"},
                          Case{"(?=a)b", "bad regex at offset 2: lookaround is not supported"},
                          Case{"a**", "bad regex at offset 2: nothing to repeat"},
                          Case{"[z-a]", "bad regex at offset 1: range out of order in character class"},
                          Case{"a$b", "bad regex at offset 1: anchor is only supported at the start or end of the pattern"},
                          Case{"\\bword", "bad regex at offset 0: word boundary \\b is not supported"}}) {
        auto r = compiler.compile_regex(c.pattern);
        ASSERT_FALSE(r.ok()) << c.pattern;
        EXPECT_EQ(r.status().message(), c.message) << c.pattern;
    }
}

}  // namespace
}  // namespace deepinfer::grammar::test
