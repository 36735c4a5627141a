// Grammar engine speed on the MaskBench subset in tests/data/maskbench with the DeepSeek vocabulary
// (129,280 logits): compile time per schema (no cache), time to the first mask, and the time of
// every fill_next_token_bitmask while each valid instance is replayed token by token (the mask is
// computed before each token is accepted, as an engine would). One thread. Prints percentiles in
// microseconds; --slowest lists the schemas with the slowest masks.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "grammar/compiler.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace deepinfer;
using Clock = std::chrono::steady_clock;

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

struct SchemaResult {
    std::string name;
    double compile_us = 0, first_mask_us = 0, worst_mask_us = 0;
    int32_t num_states = 0;
};

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Grammar engine: compile and mask times on MaskBench"};
    std::string tok_dir = "models/deepseek-v4-tokenizer", data = "tests/data/maskbench", filter;
    int32_t vocab_size = 129280;
    int slowest = 0, compile_repeats = 1;
    bool flexible = false, trace = false, compile_only = false;
    app.add_option("--tokenizer", tok_dir);
    app.add_option("--data", data);
    app.add_option("--vocab-size", vocab_size);
    app.add_option("--filter", filter, "only schema files whose name contains this");
    app.add_option("--slowest", slowest, "list this many schemas with the slowest mask");
    app.add_flag("--flexible-whitespace", flexible);
    app.add_option("--compile-repeats", compile_repeats, "compile each schema this many times and keep the fastest");
    app.add_flag("--trace", trace, "print every mask time with the matcher state");
    app.add_flag("--compile-only", compile_only, "skip the masks (for profiling compilation)");
    CLI11_PARSE(app, argc, argv);

    auto tok = tokenizer::Tokenizer::from_dir(tok_dir);
    auto t0 = Clock::now();
    auto vocab = load_vocabulary(*tok, std::max(vocab_size, tok->vocab_size()));
    double vocab_ms = micros_since(t0) / 1000;
    grammar::JsonSchemaOptions options;
    options.property_order = grammar::JsonPropertyOrder::kSorted;
    if (flexible) options.whitespace = grammar::JsonWhitespace::kFlexible;

    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(data))
        if (e.path().extension() == ".json" && e.path().filename().string().find(filter) != std::string::npos)
            files.push_back(e.path());
    std::sort(files.begin(), files.end());
    std::vector<double> compile_us, first_mask_us, mask_us;
    std::vector<SchemaResult> results;
    int refused = 0, instances = 0, not_accepted = 0;
    std::vector<uint32_t> mask(vocab->mask_words());
    for (const auto& file : files) {
        std::ifstream in(file);
        auto doc = nlohmann::json::parse(in);
        std::string schema = doc["schema"].dump();
        SchemaResult r{file.filename().string(), 1e30};
        Result<std::shared_ptr<const grammar::CompiledGrammar>> compiled = Status::invalid_argument("not compiled");
        for (int rep = 0; rep < compile_repeats; ++rep) {
            grammar::GrammarCompiler compiler(vocab);  // a fresh cache: every compile is timed
            auto c0 = Clock::now();
            compiled = compiler.compile_json_schema(schema, options);
            r.compile_us = std::min(r.compile_us, micros_since(c0));
        }
        if (!compiled.ok()) {
            ++refused;
            continue;
        }
        {
            grammar::GrammarMatcher m(compiled.value());
            auto f0 = Clock::now();
            m.fill_next_token_bitmask(mask.data());
            r.first_mask_us = r.compile_us + micros_since(f0);
        }
        r.num_states = compiled.value()->pda().num_states();
        compile_us.push_back(r.compile_us);
        first_mask_us.push_back(r.first_mask_us);
        if (compile_only) continue;
        for (const auto& t : doc["tests"]) {
            if (!t["valid"].get<bool>()) continue;
            auto ids = tok->encode(t["data"].dump(), false);
            if (!ids.ok()) continue;
            ++instances;
            grammar::GrammarMatcher m(compiled.value());
            std::vector<int32_t> tokens = ids.value();
            tokens.push_back(*tok->eos_id());
            for (int32_t id : tokens) {
                auto m0 = Clock::now();
                m.fill_next_token_bitmask(mask.data());
                double us = micros_since(m0);
                mask_us.push_back(us);
                r.worst_mask_us = std::max(r.worst_mask_us, us);
                if (trace) std::printf("%9.1f us  %-12s %s\n", us, tok->token_bytes(id).c_str(), m.describe_state().c_str());
                if (!m.accept_token(id)) {
                    ++not_accepted;
                    break;
                }
            }
        }
        results.push_back(r);
    }
    double mean = 0;
    for (double v : mask_us) mean += v;
    mean /= std::max<size_t>(1, mask_us.size());
    std::printf("vocabulary: %d ids, built in %.1f ms\n", vocab->size(), vocab_ms);
    std::printf("schemas: %zu, compiled %zu, refused %d; valid instances replayed: %d (%d not accepted)\n", files.size(),
                compile_us.size(), refused, instances, not_accepted);
    std::printf("compile us:          p50 %9.1f  p90 %9.1f  p99 %9.1f  max %9.1f\n", percentile(compile_us, 50),
                percentile(compile_us, 90), percentile(compile_us, 99), percentile(compile_us, 100));
    std::printf("time to 1st mask us: p50 %9.1f  p90 %9.1f  p99 %9.1f  max %9.1f\n", percentile(first_mask_us, 50),
                percentile(first_mask_us, 90), percentile(first_mask_us, 99), percentile(first_mask_us, 100));
    std::printf("mask us (%zu masks): p50 %7.1f  p90 %7.1f  p99 %7.1f  p99.9 %7.1f  max %9.1f  mean %7.1f\n", mask_us.size(),
                percentile(mask_us, 50), percentile(mask_us, 90), percentile(mask_us, 99), percentile(mask_us, 99.9),
                percentile(mask_us, 100), mean);
    std::sort(results.begin(), results.end(), [](const auto& a, const auto& b) { return a.worst_mask_us > b.worst_mask_us; });
    for (int i = 0; i < slowest && i < static_cast<int>(results.size()); ++i)
        std::printf("  %-50s worst mask %9.1f us, compile %9.1f us, %d states\n", results[i].name.c_str(),
                    results[i].worst_mask_us, results[i].compile_us, results[i].num_states);
    std::sort(results.begin(), results.end(), [](const auto& a, const auto& b) { return a.compile_us > b.compile_us; });
    for (int i = 0; i < slowest && i < static_cast<int>(results.size()); ++i)
        std::printf("  %-50s compile %9.1f us, %d states\n", results[i].name.c_str(), results[i].compile_us, results[i].num_states);
    return 0;
}
