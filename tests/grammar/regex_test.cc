#include <gtest/gtest.h>

#include "grammar_test_util.h"
#include "grammar/regex.h"

namespace deepinfer::grammar::test {
namespace {

std::shared_ptr<const CompiledGrammar> regex_grammar(std::string_view pattern) {
    GrammarCompiler compiler(byte_vocabulary());
    return must_compile(compiler.compile_regex(pattern));
}

TEST(Regex, MatchesWholeStrings) {
    auto g = regex_grammar("a[bc]*d|x{2,3}");
    EXPECT_TRUE(accepts_text(g, "ad"));
    EXPECT_TRUE(accepts_text(g, "abcbcd"));
    EXPECT_TRUE(accepts_text(g, "xx"));
    EXPECT_TRUE(accepts_text(g, "xxx"));
    EXPECT_FALSE(accepts_text(g, "xxxx"));
    EXPECT_FALSE(accepts_text(g, "abd "));
    EXPECT_FALSE(accepts_text(g, "a"));
}

}  // namespace
}  // namespace deepinfer::grammar::test
