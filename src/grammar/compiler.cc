#include "grammar/compiler.h"

#include "grammar/ebnf.h"
#include "grammar/grammar_error.h"
#include "grammar/json_formats.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace deepinfer::grammar {

std::string CompileOptions::cache_key() const {
    return json.cache_key() + "|" + ebnf_root + "|" + std::to_string(limits.max_nfa_states) + "," +
           std::to_string(limits.max_rule_states) + "," + std::to_string(limits.max_total_states);
}

Grammar grammar_from_regex(std::string_view pattern) {
    Grammar g;
    int32_t root = g.add_rule("root");
    g.set_rule_body(root, lower_regex(g, parse_regex(pattern), CharEncoding::kUtf8, RegexMatch::kWhole));
    g.set_root(root);
    return g;
}

Grammar grammar_from_ebnf(std::string_view text, const CompileOptions& options, FormatCache* formats) {
    return parse_ebnf(text, options.ebnf_root, options.json, formats);
}

Grammar grammar_from_json_schema(std::string_view schema, const JsonSchemaOptions& options, FormatCache* formats) {
    Grammar g;
    int32_t root = g.add_rule("root");
    g.set_rule_body(root, add_json_schema(g, schema, options, "", formats));
    g.set_root(root);
    return g;
}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const Vocabulary> vocabulary, size_t cache_capacity)
    : vocabulary_(std::move(vocabulary)), formats_(std::make_shared<FormatCache>()), capacity_(cache_capacity) {}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile(GrammarKind kind, std::string_view text,
                                                                        const CompileOptions& options) {
    std::string key = std::to_string(int(kind)) + "|" + options.cache_key() + "|";
    key.append(text);
    {
        std::lock_guard lock(mutex_);
        auto it = index_.find(key);
        if (it != index_.end()) {
            lru_.splice(lru_.begin(), lru_, it->second);
            return it->second->second;
        }
    }
    // Compiled outside the lock so other threads keep compiling and hitting the cache; if two
    // threads race on one key, both compile and the first insert wins.
    std::shared_ptr<const CompiledGrammar> compiled;
    try {
        Grammar g = kind == GrammarKind::kJsonSchema ? grammar_from_json_schema(text, options.json, formats_.get())
                    : kind == GrammarKind::kRegex    ? grammar_from_regex(text)
                                                     : grammar_from_ebnf(text, options, formats_.get());
        compiled = std::make_shared<const CompiledGrammar>(build_pda(g, options.limits), vocabulary_);
    } catch (const GrammarError& e) {
        return Status::invalid_argument(e.what());
    }
    std::lock_guard lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;
    lru_.emplace_front(std::move(key), compiled);
    index_[lru_.front().first] = lru_.begin();
    while (lru_.size() > capacity_) {
        index_.erase(lru_.back().first);
        lru_.pop_back();
    }
    return compiled;
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile_json_schema(std::string_view schema,
                                                                                    const JsonSchemaOptions& options) {
    CompileOptions o;
    o.json = options;
    return compile(GrammarKind::kJsonSchema, schema, o);
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile_regex(std::string_view pattern) {
    return compile(GrammarKind::kRegex, pattern);
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile_ebnf(std::string_view text,
                                                                             const CompileOptions& options) {
    return compile(GrammarKind::kEbnf, text, options);
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile_grammar(const Grammar& grammar,
                                                                                const PdaLimits& limits) {
    try {
        return std::shared_ptr<const CompiledGrammar>(std::make_shared<const CompiledGrammar>(build_pda(grammar, limits), vocabulary_));
    } catch (const GrammarError& e) {
        return Status::invalid_argument(e.what());
    }
}

size_t GrammarCompiler::cache_size() const {
    std::lock_guard lock(mutex_);
    return lru_.size();
}

void GrammarCompiler::clear_cache() {
    std::lock_guard lock(mutex_);
    lru_.clear();
    index_.clear();
}

}  // namespace deepinfer::grammar
