// Grammar engine speed on the MaskBench subset in tests/data/maskbench with the DeepSeek vocabulary
// (129,280 logits): compile time per schema (one compiler, as in the engine, its grammar cache
// cleared before every compile; compiled format automata stay shared), time to the first mask, and
// the time of every fill_next_token_bitmask while each valid instance is replayed token by token
// (the mask is computed before each token is accepted, as an engine would). One thread. Prints
// percentiles in microseconds; --slowest lists the schemas with the slowest mask and compile.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "grammar/compiler.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace deepinfer;
using Clock = std::chrono::steady_clock;
using Compiled = Result<std::shared_ptr<const grammar::CompiledGrammar>>;

double micros_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * v.size()))];
}

std::shared_ptr<const grammar::Vocabulary> load_vocabulary(const tokenizer::Tokenizer& tok, int32_t size) {
    std::vector<std::string> bytes(size);
    std::vector<uint8_t> special(size, 0);
    for (int32_t id = 0; id < tok.vocab_size() && id < size; ++id)
        if (tok.is_valid_id(id)) bytes[id] = tok.token_bytes(id), special[id] = tok.is_special(id);
    return grammar::Vocabulary::create(std::move(bytes), std::move(special), {*tok.eos_id()});
}

struct Options {
    std::string tokenizer = "models/deepseek-v4-tokenizer", data = "tests/data/maskbench", filter;
    int32_t vocab_size = 129280;
    int slowest = 0, compile_repeats = 1;
    bool flexible = false, trace = false, compile_only = false;
};

struct SchemaResult {
    std::string name;
    double compile_us = 1e30, first_mask_us = 0, worst_mask_us = 0;
    int32_t num_states = 0;
};

struct Totals {
    std::vector<double> compile_us, first_mask_us, mask_us;
    std::vector<SchemaResult> schemas;
    int refused = 0, instances = 0, not_accepted = 0;
};

// Replays one valid instance: a mask before every token (EOS included), then the token.
void replay(const std::shared_ptr<const grammar::CompiledGrammar>& g, const tokenizer::Tokenizer& tok, const std::string& text,
            const Options& o, SchemaResult& r, Totals& t) {
    auto ids = tok.encode(text, false);
    if (!ids.ok()) return;
    ++t.instances;
    std::vector<uint32_t> mask(g->vocabulary().mask_words());
    grammar::GrammarMatcher m(g);
    std::vector<int32_t> tokens = ids.value();
    tokens.push_back(*tok.eos_id());
    for (int32_t id : tokens) {
        auto m0 = Clock::now();
        m.fill_next_token_bitmask(mask.data());
        double us = micros_since(m0);
        t.mask_us.push_back(us);
        r.worst_mask_us = std::max(r.worst_mask_us, us);
        if (o.trace) std::printf("%9.1f us  %-12s %s\n", us, tok.token_bytes(id).c_str(), m.describe_state().c_str());
        if (!m.accept_token(id)) {
            ++t.not_accepted;
            return;
        }
    }
}

void run_schema(const std::filesystem::path& file, grammar::GrammarCompiler& compiler, const tokenizer::Tokenizer& tok,
                const grammar::JsonSchemaOptions& options, const Options& o, Totals& t) {
    const auto& vocab = compiler.vocabulary();
    std::ifstream in(file);
    auto doc = nlohmann::json::parse(in);
    std::string schema = doc["schema"].dump();
    SchemaResult r{file.filename().string()};
    Compiled compiled = Status::invalid_argument("not compiled");
    for (int rep = 0; rep < o.compile_repeats; ++rep) {
        compiler.clear_cache();  // every compile is timed
        auto c0 = Clock::now();
        compiled = compiler.compile_json_schema(schema, options);
        r.compile_us = std::min(r.compile_us, micros_since(c0));
    }
    if (!compiled.ok()) {
        ++t.refused;
        return;
    }
    {
        grammar::GrammarMatcher m(compiled.value());
        std::vector<uint32_t> mask(vocab->mask_words());
        auto f0 = Clock::now();
        m.fill_next_token_bitmask(mask.data());
        r.first_mask_us = r.compile_us + micros_since(f0);
    }
    r.num_states = compiled.value()->pda().num_states();
    t.compile_us.push_back(r.compile_us);
    t.first_mask_us.push_back(r.first_mask_us);
    if (!o.compile_only)
        for (const auto& test : doc["tests"])
            if (test["valid"].get<bool>()) replay(compiled.value(), tok, test["data"].dump(), o, r, t);
    t.schemas.push_back(r);
}

void print(const Totals& t, size_t num_files, int32_t vocab_ids, double vocab_ms, const Options& o) {
    double mean = 0;
    for (double v : t.mask_us) mean += v;
    mean /= std::max<size_t>(1, t.mask_us.size());
    auto row = [](const char* name, const std::vector<double>& v) {
        std::printf("%-20s p50 %9.1f  p90 %9.1f  p99 %9.1f  max %9.1f\n", name, percentile(v, 50), percentile(v, 90),
                    percentile(v, 99), percentile(v, 100));
    };
    std::printf("vocabulary: %d ids, built in %.1f ms\n", vocab_ids, vocab_ms);
    std::printf("schemas: %zu, compiled %zu, refused %d; valid instances replayed: %d (%d not accepted)\n", num_files,
                t.compile_us.size(), t.refused, t.instances, t.not_accepted);
    row("compile us:", t.compile_us);
    row("time to 1st mask us:", t.first_mask_us);
    std::printf("mask us (%zu masks): p50 %7.1f  p90 %7.1f  p99 %7.1f  p99.9 %7.1f  max %9.1f  mean %7.1f\n", t.mask_us.size(),
                percentile(t.mask_us, 50), percentile(t.mask_us, 90), percentile(t.mask_us, 99), percentile(t.mask_us, 99.9),
                percentile(t.mask_us, 100), mean);
    std::vector<SchemaResult> by = t.schemas;
    std::sort(by.begin(), by.end(), [](const auto& a, const auto& b) { return a.worst_mask_us > b.worst_mask_us; });
    for (int i = 0; i < o.slowest && i < static_cast<int>(by.size()); ++i)
        std::printf("  %-50s worst mask %9.1f us, compile %9.1f us, %d states\n", by[i].name.c_str(), by[i].worst_mask_us,
                    by[i].compile_us, by[i].num_states);
    std::sort(by.begin(), by.end(), [](const auto& a, const auto& b) { return a.compile_us > b.compile_us; });
    for (int i = 0; i < o.slowest && i < static_cast<int>(by.size()); ++i)
        std::printf("  %-50s compile %9.1f us, %d states\n", by[i].name.c_str(), by[i].compile_us, by[i].num_states);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Grammar engine: compile and mask times on MaskBench"};
    Options o;
    app.add_option("--tokenizer", o.tokenizer);
    app.add_option("--data", o.data);
    app.add_option("--vocab-size", o.vocab_size);
    app.add_option("--filter", o.filter, "only schema files whose name contains this");
    app.add_option("--slowest", o.slowest, "list this many schemas with the slowest mask and compile");
    app.add_option("--compile-repeats", o.compile_repeats, "compile each schema this many times and keep the fastest");
    app.add_flag("--flexible-whitespace", o.flexible);
    app.add_flag("--trace", o.trace, "print every mask time with the matcher state");
    app.add_flag("--compile-only", o.compile_only, "skip the masks (for profiling compilation)");
    CLI11_PARSE(app, argc, argv);

    auto tok = tokenizer::Tokenizer::from_dir(o.tokenizer);
    auto t0 = Clock::now();
    auto vocab = load_vocabulary(*tok, std::max(o.vocab_size, tok->vocab_size()));
    double vocab_ms = micros_since(t0) / 1000;
    grammar::JsonSchemaOptions options;
    options.property_order = grammar::JsonPropertyOrder::kSorted;
    if (o.flexible) options.whitespace = grammar::JsonWhitespace::kFlexible;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(o.data))
        if (e.path().extension() == ".json" && e.path().filename().string().find(o.filter) != std::string::npos)
            files.push_back(e.path());
    std::sort(files.begin(), files.end());
    Totals totals;
    grammar::GrammarCompiler compiler(vocab);
    for (const auto& file : files) run_schema(file, compiler, *tok, options, o, totals);
    print(totals, files.size(), vocab->size(), vocab_ms, o);
    return 0;
}
