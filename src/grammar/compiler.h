#pragma once
// Entry point of the grammar engine: compiles JSON Schemas, regexes and EBNF grammars into
// CompiledGrammar objects for one vocabulary. Thread-safe; results are cached by
// (kind, text, options) and shared read-only. Errors come back as a Status whose message names the
// problem (an unsupported keyword, "bad regex at offset N", "EBNF syntax error at line:col").
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/status.h"
#include "grammar/compiled_grammar.h"
#include "grammar/grammar_ir.h"
#include "grammar/json_schema_options.h"
#include "grammar/vocabulary.h"

namespace deepinfer::grammar {

enum class GrammarKind { kJsonSchema, kRegex, kEbnf };

struct CompileOptions {
    JsonSchemaOptions json;      // JSON Schema, and schemas embedded in EBNF with %json
    std::string ebnf_root = "root";
    PdaLimits limits;

    std::string cache_key() const;
};

class FormatCache;

// The grammar IR without compiling it (to inspect it, or to build on it). Throws GrammarError.
// `formats` (optional) shares compiled format automata between calls.
Grammar grammar_from_regex(std::string_view pattern);
Grammar grammar_from_ebnf(std::string_view text, const CompileOptions& options = {}, FormatCache* formats = nullptr);
Grammar grammar_from_json_schema(std::string_view schema, const JsonSchemaOptions& options = {},
                                 FormatCache* formats = nullptr);

class GrammarCompiler {
public:
    explicit GrammarCompiler(std::shared_ptr<const Vocabulary> vocabulary, size_t cache_capacity = 1024);

    Result<std::shared_ptr<const CompiledGrammar>> compile(GrammarKind kind, std::string_view text,
                                                           const CompileOptions& options = {});
    Result<std::shared_ptr<const CompiledGrammar>> compile_json_schema(std::string_view schema,
                                                                       const JsonSchemaOptions& options = {});
    Result<std::shared_ptr<const CompiledGrammar>> compile_regex(std::string_view pattern);
    Result<std::shared_ptr<const CompiledGrammar>> compile_ebnf(std::string_view text, const CompileOptions& options = {});
    // Compiles an IR built by hand (not cached).
    Result<std::shared_ptr<const CompiledGrammar>> compile_grammar(const Grammar& grammar, const PdaLimits& limits = {});

    size_t cache_size() const;
    void clear_cache();
    const std::shared_ptr<const Vocabulary>& vocabulary() const { return vocabulary_; }

private:
    using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;

    std::shared_ptr<const Vocabulary> vocabulary_;
    std::shared_ptr<FormatCache> formats_;
    size_t capacity_;
    mutable std::mutex mutex_;
    std::list<Entry> lru_;  // most recently used first
    std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace deepinfer::grammar
