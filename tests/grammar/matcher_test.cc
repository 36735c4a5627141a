// The matcher over the real DeepSeek vocabulary: masks agree with accept_token (sampled tokens at
// random states, and every token at some states), rollback and forks restore / isolate state,
// forced bytes are the only continuation, EOS exactly where the grammar can end, special tokens
// never; the compiler's cache shared by threads; unsupported keywords named.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

#include "grammar_test_util.h"
#include "json_text.h"

namespace deepinfer::grammar::test {
namespace {

std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& mask, int32_t vocab_size) {
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < vocab_size; ++id)
        if (mask_allows(mask, id)) ids.push_back(id);
    return ids;
}

// A handful of grammars of every kind: MaskBench schemas (a seeded sample), a recursive schema, an
// ambiguous EBNF (several stacks alive at once) and a regex.
std::vector<std::shared_ptr<const CompiledGrammar>> sample_grammars(GrammarCompiler& compiler, std::mt19937& rng, size_t num_schemas) {
    std::vector<std::shared_ptr<const CompiledGrammar>> out;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(data_path("maskbench")))
        if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    std::shuffle(files.begin(), files.end(), rng);
    for (const auto& f : files) {
        if (out.size() >= num_schemas) break;
        JsonText doc = parse_json_text(read_file(f.string()));
        auto g = compiler.compile_json_schema(write_json_text(*doc.find("schema"), false));
        if (g.ok()) out.push_back(g.value());
    }
    out.push_back(must_compile(compiler.compile_json_schema(
        R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}, "$ref": "#/$defs/node"})")));
    out.push_back(must_compile(compiler.compile_ebnf(
        "root ::= (a | b)+\na ::= \"ab\" [a-z]* \";\"\nb ::= \"a\" [b-d]+ \".\" | \"abc\" c\nc ::= \"(\" (c | [0-9])* \")\"")));
    out.push_back(must_compile(compiler.compile_regex("(\\w+@[a-z]+\\.(com|org)|[0-9]{2,5})( [A-Z][a-z]*){0,3}")));
    return out;
}

// One step of a random walk: a random allowed token, EOS preferred with probability p_end.
int32_t pick(const std::vector<int32_t>& allowed, const Vocabulary& v, std::mt19937& rng, double p_end) {
    if (allowed.empty()) return -1;
    bool eos_allowed = std::any_of(allowed.begin(), allowed.end(), [&](int32_t id) { return v.is_eos(id); });
    if (eos_allowed && std::uniform_real_distribution<double>(0, 1)(rng) < p_end) return v.eos_ids()[0];
    return allowed[rng() % allowed.size()];
}

// Like pick, but steering towards the end of JSON values: closing tokens when the mask has some.
int32_t pick_closing(const std::vector<int32_t>& allowed, const Vocabulary& v, std::mt19937& rng) {
    std::vector<int32_t> closing;
    for (int32_t id : allowed)
        if (v.is_eos(id) || v.token_bytes(id).find_first_not_of("\"}]") == std::string::npos) closing.push_back(id);
    if (!closing.empty() && rng() % 5 != 0) return pick(closing, v, rng, 0.9);
    return pick(allowed, v, rng, 0.9);
}

TEST(Matcher, MaskAgreesWithAcceptTokenAtRandomStates) {
    std::mt19937 rng(12345);
    GrammarCompiler compiler(deepseek_vocabulary());
    const Vocabulary& v = *deepseek_vocabulary();
    std::vector<uint32_t> mask(v.mask_words());
    int checked = 0, exhaustive_states = 0;
    for (const auto& g : sample_grammars(compiler, rng, 24)) {
        for (int walk = 0; walk < 3; ++walk) {
            GrammarMatcher m(g);
            for (int step = 0; step < 40 && !m.is_terminated(); ++step) {
                m.fill_next_token_bitmask(mask.data());
                auto allowed = allowed_ids(mask, v.size());
                // Sampled tokens: some the mask allows, some anywhere in the vocabulary.
                std::vector<int32_t> probes;
                for (int k = 0; k < 24; ++k) probes.push_back(k % 2 && !allowed.empty() ? allowed[rng() % allowed.size()] : int32_t(rng() % v.size()));
                if (walk == 0 && step == 3) {  // every token, at one state per grammar
                    probes.clear();
                    for (int32_t id = 0; id < v.size(); ++id) probes.push_back(id);
                    ++exhaustive_states;
                }
                for (int32_t id : probes) {
                    GrammarMatcher fork = m;
                    ASSERT_EQ(fork.accept_token(id), mask_allows(mask, id)) << "token " << id << " at step " << step << " state " << m.describe_state();
                    ++checked;
                }
                int32_t next = pick(allowed, v, rng, 0.2);
                if (next < 0) break;
                ASSERT_TRUE(m.accept_token(next));
            }
        }
    }
    EXPECT_GT(checked, 100000);
    EXPECT_GT(exhaustive_states, 10);
}

TEST(Matcher, RollbackRestoresEarlierStates) {
    std::mt19937 rng(99);
    GrammarCompiler compiler(deepseek_vocabulary());
    const Vocabulary& v = *deepseek_vocabulary();
    for (const auto& g : sample_grammars(compiler, rng, 6)) {
        GrammarMatcher m(g);
        std::vector<uint32_t> mask(v.mask_words());
        m.fill_next_token_bitmask(mask.data());
        std::vector<std::vector<uint32_t>> masks{mask};  // masks[i]: the mask after i accepted tokens
        for (int step = 0; step < 30; ++step) {
            int32_t next = pick(allowed_ids(masks.back(), v.size()), v, rng, 0.1);
            if (next < 0 || !m.accept_token(next)) break;
            m.fill_next_token_bitmask(mask.data());
            masks.push_back(mask);
            if (step % 7 == 6) {  // go back a few tokens: the mask must be the one recorded then
                int32_t back = 1 + rng() % 4;
                ASSERT_TRUE(m.rollback(back));
                masks.resize(masks.size() - back);
                m.fill_next_token_bitmask(mask.data());
                ASSERT_EQ(mask, masks.back());
            }
        }
        EXPECT_FALSE(m.rollback(m.num_rollback_steps() + 1));
        ASSERT_TRUE(m.rollback(m.num_rollback_steps()));
        m.fill_next_token_bitmask(mask.data());
        EXPECT_EQ(mask, masks.front());
    }
    // A bounded history keeps only the newest steps.
    GrammarMatcher bounded(must_compile(compiler.compile_regex("[a-z]{0,50}")), 3);
    for (const char* piece : {"a", "b", "c", "d", "e"}) ASSERT_TRUE(bounded.accept_bytes(piece));
    EXPECT_EQ(bounded.num_rollback_steps(), 3);
    EXPECT_FALSE(bounded.rollback(4));
    EXPECT_TRUE(bounded.rollback(3));
}

TEST(Matcher, ForksAreIndependent) {
    GrammarCompiler compiler(deepseek_vocabulary());
    auto g = must_compile(compiler.compile_json_schema(R"({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["a", "b"], "additionalProperties": false})"));
    const Vocabulary& v = *deepseek_vocabulary();
    std::vector<uint32_t> before(v.mask_words()), after(v.mask_words()), forked(v.mask_words());
    GrammarMatcher m(g);
    ASSERT_TRUE(m.accept_bytes(R"({"a":"x)"));
    m.fill_next_token_bitmask(before.data());
    GrammarMatcher fork = m;
    ASSERT_TRUE(fork.accept_bytes(R"(","b":)"));
    fork.fill_next_token_bitmask(forked.data());
    m.fill_next_token_bitmask(after.data());
    EXPECT_EQ(before, after);
    EXPECT_NE(before, forked);
    int32_t one = *deepseek_tokenizer()->token_to_id("1");
    EXPECT_TRUE(mask_allows(forked, one));   // an integer value may start
    EXPECT_TRUE(mask_allows(after, one));    // still inside the string "x...": "1" is content
    EXPECT_FALSE(mask_allows(forked, *deepseek_tokenizer()->token_to_id("a")));
}

TEST(Matcher, ForcedBytesAreTheOnlyContinuation) {
    std::mt19937 rng(5);
    GrammarCompiler compiler(deepseek_vocabulary());
    const Vocabulary& v = *deepseek_vocabulary();
    std::vector<uint32_t> mask(v.mask_words());
    int nonempty = 0, forced_token_states = 0;
    for (const auto& g : sample_grammars(compiler, rng, 12)) {
        GrammarMatcher m(g);
        for (int step = 0; step < 30 && !m.is_terminated(); ++step) {
            std::string forced = m.forced_bytes();
            m.fill_next_token_bitmask(mask.data());
            auto allowed = allowed_ids(mask, v.size());
            std::set<uint8_t> first_bytes;
            bool eos = false;
            for (int32_t id : allowed) {
                if (v.is_eos(id)) {
                    eos = true;
                    continue;
                }
                const std::string& t = v.token_bytes(id);
                first_bytes.insert(static_cast<uint8_t>(t[0]));
                size_t n = std::min(t.size(), forced.size());
                ASSERT_EQ(t.substr(0, n), forced.substr(0, n)) << "token '" << t << "' allowed but forced '" << forced << "'";
            }
            if (forced.empty()) {
                EXPECT_TRUE(eos || first_bytes.size() >= 2) << m.describe_state();
            } else {
                ++nonempty;
                EXPECT_FALSE(eos);
                GrammarMatcher fork = m;
                EXPECT_TRUE(fork.accept_bytes(forced));
            }
            // Forced tokens: accepted in order, spelling a prefix of the forced bytes, and no
            // vocabulary token starting where the last one starts runs past the forced bytes.
            std::vector<int32_t> tokens = m.forced_tokens();
            GrammarMatcher fork = m;
            std::string spelled, last;
            for (int32_t id : tokens) {
                ASSERT_TRUE(fork.accept_token(id));
                last = v.token_bytes(id);
                spelled += last;
            }
            ASSERT_EQ(forced.substr(0, spelled.size()), spelled);
            if (!tokens.empty()) {
                std::string rest = forced.substr(spelled.size() - last.size());
                for (int32_t id = 0; id < v.size(); ++id) {
                    const std::string& t = v.token_bytes(id);
                    ASSERT_FALSE(!v.is_special(id) && t.size() > rest.size() && t.compare(0, rest.size(), rest) == 0)
                        << "token '" << t << "' could cover the forced '" << rest << "' differently";
                }
                ++forced_token_states;
            }
            int32_t next = pick(allowed, v, rng, 0.1);
            if (next < 0) break;
            ASSERT_TRUE(m.accept_token(next));
        }
    }
    EXPECT_GT(nonempty, 5);
    EXPECT_GT(forced_token_states, 3);
}

TEST(Matcher, EosOnlyWhereTheGrammarCanEndAndSpecialTokensNever) {
    std::mt19937 rng(77);
    GrammarCompiler compiler(deepseek_vocabulary());
    const Vocabulary& v = *deepseek_vocabulary();
    std::vector<int32_t> specials;
    for (int32_t id = 0; id < v.size(); ++id)
        if (v.is_special(id) && !v.is_eos(id)) specials.push_back(id);
    ASSERT_FALSE(specials.empty());
    std::vector<uint32_t> mask(v.mask_words());
    int terminated = 0;
    for (const auto& g : sample_grammars(compiler, rng, 12)) {
        GrammarMatcher m(g);
        for (int step = 0; step < 80; ++step) {
            m.fill_next_token_bitmask(mask.data());
            EXPECT_EQ(mask_allows(mask, v.eos_ids()[0]), m.can_terminate());
            for (int32_t id : specials) ASSERT_FALSE(mask_allows(mask, id));
            GrammarMatcher fork = m;
            EXPECT_FALSE(fork.accept_token(specials[rng() % specials.size()]));
            auto allowed = allowed_ids(mask, v.size());
            int32_t next = step < 10 ? pick(allowed, v, rng, 0.9) : pick_closing(allowed, v, rng);
            if (next < 0) break;
            ASSERT_TRUE(m.accept_token(next));
            if (m.is_terminated()) {
                ++terminated;
                m.fill_next_token_bitmask(mask.data());
                EXPECT_TRUE(allowed_ids(mask, v.size()).empty());
                EXPECT_FALSE(m.accept_token(v.eos_ids()[0]));
                ASSERT_TRUE(m.rollback(1));
                EXPECT_FALSE(m.is_terminated());
                EXPECT_TRUE(m.can_terminate());
                break;
            }
        }
    }
    EXPECT_GE(terminated, 3);
    auto nothing = must_compile(compiler.compile_json_schema("false"));
    GrammarMatcher m(nothing);
    m.fill_next_token_bitmask(mask.data());
    EXPECT_TRUE(allowed_ids(mask, v.size()).empty());
}

TEST(Compiler, CacheIsSharedAcrossThreadsAndResultsAgree) {
    std::mt19937 rng(3);
    std::vector<std::string> schemas;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(data_path("maskbench")))
        if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    std::shuffle(files.begin(), files.end(), rng);
    for (size_t i = 0; i < files.size() && schemas.size() < 12; ++i)
        if (std::filesystem::file_size(files[i]) < 4000)
            schemas.push_back(write_json_text(*parse_json_text(read_file(files[i].string())).find("schema"), false));
    GrammarCompiler shared(deepseek_vocabulary());
    const Vocabulary& v = *deepseek_vocabulary();
    // Reference: first masks from a compiler of its own.
    std::vector<std::vector<uint32_t>> expected(schemas.size());
    for (size_t i = 0; i < schemas.size(); ++i) {
        GrammarCompiler alone(deepseek_vocabulary());
        auto g = alone.compile_json_schema(schemas[i]);
        expected[i].assign(v.mask_words(), 0);
        if (g.ok()) GrammarMatcher(g.value()).fill_next_token_bitmask(expected[i].data());
    }
    std::vector<std::vector<const CompiledGrammar*>> seen(4, std::vector<const CompiledGrammar*>(schemas.size()));
    std::vector<int> mismatches(4, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            std::mt19937 order(t);
            std::vector<size_t> idx(schemas.size());
            for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
            std::shuffle(idx.begin(), idx.end(), order);
            std::vector<uint32_t> mask(v.mask_words(), 0);
            for (size_t i : idx) {
                auto g = shared.compile_json_schema(schemas[i]);
                std::fill(mask.begin(), mask.end(), 0);
                if (g.ok()) GrammarMatcher(g.value()).fill_next_token_bitmask(mask.data()), seen[t][i] = g.value().get();
                mismatches[t] += mask != expected[i];
            }
        });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0);
    for (size_t i = 0; i < schemas.size(); ++i)
        for (int t = 1; t < 4; ++t) EXPECT_EQ(seen[t][i], seen[0][i]) << "one compiled grammar per schema";
    EXPECT_LE(shared.cache_size(), schemas.size());
}

TEST(Compiler, UnsupportedKeywordsAreNamed) {
    GrammarCompiler compiler(byte_vocabulary());
    struct Case {
        const char* schema;
        const char* keyword;
    };
    for (const Case& c : {Case{R"({"type": "array", "uniqueItems": true})", "'uniqueItems'"},
                          Case{R"({"if": {"type": "string"}, "then": {"minLength": 2}})", "'if'"},
                          Case{R"({"type": "array", "contains": {"type": "integer"}})", "'contains'"},
                          Case{R"({"propertyNames": {"anyOf": [{"maxLength": 3}, {"pattern": "^x"}]}})", "'propertyNames'"},
                          Case{R"({"dependentRequired": {"a": ["b"]}})", "'dependentRequired'"},
                          Case{R"({"unevaluatedProperties": false})", "'unevaluatedProperties'"},
                          Case{R"({"type": "string", "format": "hostname"})", "'hostname'"},
                          Case{R"({"oneOf": [{"type": "string"}, {"maxLength": 3}]})", "'oneOf'"},
                          Case{R"({"$ref": "other.json"})", "'other.json'"}}) {
        auto r = compiler.compile_json_schema(c.schema);
        ASSERT_FALSE(r.ok()) << c.schema;
        EXPECT_NE(r.status().message().find(c.keyword), std::string::npos) << r.status().message();
    }
}

}  // namespace
}  // namespace deepinfer::grammar::test
