// The EBNF front-end: a recursive grammar against a hand-written recursive-descent recognizer on
// random inputs, repetition / classes / literals, embedded JSON Schemas and regexes, and errors.
#include <gtest/gtest.h>

#include <random>

#include "conformance_util.h"
#include "arithmetic.h"
#include "grammar_test_util.h"

namespace deepinfer::grammar::test {
namespace {

using deepinfer::test::Arithmetic;
using deepinfer::test::kArithmetic;


std::string random_expression(std::mt19937& rng, int depth) {
    switch (rng() % (depth > 0 ? 6 : 3)) {
        case 0: return std::to_string(rng() % 1000) + (rng() % 3 == 0 ? "." + std::to_string(rng() % 100) : "");
        case 1: return std::string(1, char('a' + rng() % 26)) + (rng() % 2 ? "x_1" : "");
        case 2: return "-" + std::to_string(rng() % 10);
        case 3: return "(" + random_expression(rng, depth - 1) + ")";
        case 4: return random_expression(rng, depth - 1) + "*" + random_expression(rng, depth - 1);
        default: return random_expression(rng, depth - 1) + (rng() % 2 ? "+" : "-") + random_expression(rng, depth - 1);
    }
}

// Valid expressions, and the same with one character changed, dropped or doubled.
std::string mutate(std::mt19937& rng, std::string s) {
    static const std::string kChars = "0123456789.+-*()ax_ ";
    if (s.empty()) return s;
    size_t at = rng() % s.size();
    switch (rng() % 4) {
        case 0: s[at] = kChars[rng() % kChars.size()]; break;
        case 1: s.erase(at, 1); break;
        case 2: s.insert(at, 1, s[at]); break;
        default: s += "." + std::to_string(rng() % 100);  // a second fraction after a number
    }
    return s;
}

TEST(Ebnf, RecursiveGrammarAgreesWithRecursiveDescent) {
    GrammarCompiler compiler(byte_vocabulary());
    auto g = must_compile(compiler.compile_ebnf(kArithmetic));
    auto bounded = must_compile(compiler.compile_ebnf(deepinfer::test::kBoundedArithmetic));
    std::mt19937 rng(7);
    int valid = 0, invalid = 0, bounded_valid = 0;
    for (int i = 0; i < 3000; ++i) {
        std::string text = random_expression(rng, 4);
        if (i % 2) text = mutate(rng, text);
        bool expected = Arithmetic::accepts(text);
        ASSERT_EQ(accepts_text(g, text), expected) << text;
        bool expected_bounded = Arithmetic::accepts(text, 4, 3, 3);
        ASSERT_EQ(accepts_text(bounded, text), expected_bounded) << text;
        (expected ? valid : invalid)++;
        bounded_valid += expected_bounded;
    }
    EXPECT_GT(valid, 1000);
    EXPECT_GT(invalid, 500);
    EXPECT_GT(bounded_valid, 300);
    EXPECT_LT(bounded_valid, valid);
}

TEST(Ebnf, RandomOutputsOverTheDeepSeekVocabularyParse) {
    std::mt19937 rng(8);
    GrammarCompiler compiler(deepseek_vocabulary());
    auto g = must_compile(compiler.compile_ebnf(kArithmetic));
    int outputs = 0;
    for (int k = 0; k < 150; ++k)
        if (auto text = random_output(g, rng, 6, 40)) {
            ASSERT_TRUE(Arithmetic::accepts(*text)) << *text;
            ++outputs;
        }
    EXPECT_GT(outputs, 50);
}

TEST(Ebnf, LiteralsClassesAndRepetition) {
    GrammarCompiler compiler(byte_vocabulary());
    auto g = must_compile(compiler.compile_ebnf(R"ebnf(
        root ::= greeting ' ' [^\n!]{2,4} "!"? tail
        greeting ::= "h\x69" | 'héllo' | "\u4F60\u597D"
        tail ::= ( ";" . )*
    )ebnf"));
    EXPECT_TRUE(accepts_text(g, "hi abc"));
    EXPECT_TRUE(accepts_text(g, "héllo ab!"));
    EXPECT_TRUE(accepts_text(g, "你好 世界!;x;😀"));
    EXPECT_FALSE(accepts_text(g, "hi a"));        // too few
    EXPECT_FALSE(accepts_text(g, "hi abcde"));    // too many
    EXPECT_FALSE(accepts_text(g, "hi ab\nc"));    // class excludes newline
    EXPECT_FALSE(accepts_text(g, "hi ab!;"));     // ";" needs one character after it
    EXPECT_FALSE(accepts_text(g, "hi ab!!"));     // "!"? is at most one
}

TEST(Ebnf, EmbedsJsonSchemasAndRegexes) {
    GrammarCompiler compiler(byte_vocabulary());
    auto g = must_compile(compiler.compile_ebnf(R"ebnf(
        root ::= call+
        call ::= "<call name=\"" /[a-z_]{1,16}/ "\">" %json{"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"], "additionalProperties": false} "</call>"
    )ebnf"));
    EXPECT_TRUE(accepts_text(g, R"(<call name="add">{"n":3}</call>)"));
    EXPECT_TRUE(accepts_text(g, R"(<call name="a">{"n":1}</call><call name="b_c">{"n":20}</call>)"));
    EXPECT_FALSE(accepts_text(g, R"(<call name="add">{"n":0}</call>)"));
    EXPECT_FALSE(accepts_text(g, R"(<call name="Add">{"n":3}</call>)"));
    EXPECT_FALSE(accepts_text(g, R"(<call name="add">{"n":3,"m":1}</call>)"));
}

// %text: the raw value ends at the first occurrence of its terminator (the reference finds it in
// value + terminator), and the schema's string constraints hold for the raw characters.
TEST(Ebnf, RawTextEndsAtItsTerminator) {
    GrammarCompiler compiler(byte_vocabulary());
    auto free = must_compile(compiler.compile_ebnf(R"(root ::= "<v>" %text{"type": "string"} until "</v>" "!")"));
    auto overlap = must_compile(compiler.compile_ebnf(R"(root ::= %text{"type": "string"} until "abab")"));
    std::mt19937 rng(5);
    const std::vector<std::string> pieces = {"a", "b", "<", "/", "v", ">", "é", "\n", "\"", "</v>"};
    int accepted = 0, refused = 0;
    for (int i = 0; i < 2000; ++i) {
        std::string v;
        for (int n = rng() % 7; n > 0; --n) v += pieces[rng() % pieces.size()];
        std::string closed = v, wrapped = "<v>", doubled = v;
        closed.append("</v>");
        wrapped.append(closed).push_back('!');
        doubled.append("abab");
        bool expected = closed.find("</v>") == v.size();
        ASSERT_EQ(accepts_text(free, wrapped), expected) << v;
        ASSERT_EQ(accepts_text(overlap, doubled), doubled.find("abab") == v.size()) << v;
        (expected ? accepted : refused)++;
    }
    EXPECT_GT(accepted, 500);
    EXPECT_GT(refused, 200);
    EXPECT_FALSE(accepts_text(overlap, "ababab"));  // "ab" + "abab": the terminator comes first at 0

    auto bounded = must_compile(compiler.compile_ebnf(
        R"(root ::= %text{"type": "string", "pattern": "^[a-zé]+$", "maxLength": 3, "description": "x"} until "</p>")"));
    EXPECT_TRUE(accepts_text(bounded, "ab</p>"));
    EXPECT_TRUE(accepts_text(bounded, "éé</p>"));     // lengths count characters
    EXPECT_FALSE(accepts_text(bounded, "abcd</p>"));
    EXPECT_FALSE(accepts_text(bounded, "a1</p>"));
    EXPECT_FALSE(accepts_text(bounded, "</p>"));
    auto choice = must_compile(compiler.compile_ebnf(R"(root ::= %text{"enum": ["x y", "a\"b"]} until "</p>")"));
    EXPECT_TRUE(accepts_text(choice, "x y</p>"));
    EXPECT_TRUE(accepts_text(choice, "a\"b</p>"));   // raw: the quote is not escaped
    EXPECT_FALSE(accepts_text(choice, "x</p>"));
    for (const char* bad : {R"(root ::= %text{"type": "integer"} until "x")", R"(root ::= %text{"minItems": 1} until "x")",
                            R"(root ::= %text{"type": "string"} "x")"})
        EXPECT_FALSE(compiler.compile_ebnf(bad).ok()) << bad;
}

TEST(Ebnf, ErrorsNameLineAndColumn) {
    GrammarCompiler compiler(byte_vocabulary());
    struct Case {
        const char* text;
        const char* message;
    };
    for (const Case& c : {
             Case{"root ::= \"a\" (b", "EBNF syntax error at 1:16: expected ')'"},
             Case{"root ::= a\nb ::= \"x\"\nroot ::= \"y\"", "EBNF syntax error at 3:1: rule 'root' is defined twice"},
             Case{"root ::= \"a\" missing", "EBNF syntax error at 1:14: undefined rule 'missing'"},
             Case{"root ::= [a-", "EBNF syntax error at 1:13: unterminated character class"},
             Case{"root ::= /a(/", "EBNF syntax error at 1:11: bad regex at offset 2: missing ')'"},
             Case{"root ::= \"a\"{3,1}", "EBNF syntax error at 1:18: repetition bounds out of order"},
             Case{"start ::= \"a\"", "EBNF grammar has no rule named 'root'"},
             Case{"root ::= list\nlist ::= list \",\" item | item\nitem ::= \"x\"",
                  "left recursion is not supported: list -> list"},
         }) {
        auto r = compiler.compile_ebnf(c.text);
        ASSERT_FALSE(r.ok()) << c.text;
        EXPECT_EQ(r.status().message(), c.message) << c.text;
    }
}

}  // namespace
}  // namespace deepinfer::grammar::test
