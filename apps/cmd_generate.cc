// `deepinfer generate`: one prompt streamed to stdout, or a JSONL file of prompts run as one batch
// with a progress bar, results as JSONL in input order.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>

#include <nlohmann/json.hpp>

#include "apps/commands.h"
#include "apps/progress.h"
#include "base/error.h"
#include "deepinfer/engine.h"

namespace deepinfer::apps {

void add_generate_command(CLI::App& app, GenerateOptions& o) {
    auto* cmd = app.add_subcommand("generate", "Generate text for a prompt or a JSONL file of prompts");
    auto* one = cmd->add_option("--prompt", o.prompt, "prompt text");
    auto* many = cmd->add_option("--prompts", o.prompts_file, "JSONL file, one {\"prompt\": ...} per line (optional per-line "
                                                             "max_tokens, temperature, top_p, top_k, seed, stop, n)")
                     ->check(CLI::ExistingFile);
    one->excludes(many);
    cmd->add_option("--output", o.output_file, "JSONL results for --prompts (default: stdout)");
    add_engine_options(cmd, o.engine);
    add_sampling_options(cmd, o.sampling);
    add_grammar_options(cmd, o.grammar);
}

namespace {

GenerationRequest request_from_json(const nlohmann::json& j, const SamplingParams& defaults, size_t line) {
    DI_CHECK(j.is_object() && j.contains("prompt") && j["prompt"].is_string(), "prompts line {}: needs a \"prompt\" string",
             line);
    static const std::set<std::string> kKeys = {"prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "n", "stop"};
    for (const auto& [key, value] : j.items())
        DI_CHECK(kKeys.count(key), "prompts line {}: unknown field \"{}\" (known: prompt, max_tokens, temperature, top_p, "
                 "top_k, seed, n, stop)", line, key);
    GenerationRequest r;
    r.prompt = j["prompt"].get<std::string>();
    r.sampling = defaults;
    try {
        if (j.contains("max_tokens")) r.sampling.max_tokens = j["max_tokens"].get<int>();
        if (j.contains("temperature")) r.sampling.temperature = j["temperature"].get<float>();
        if (j.contains("top_p")) r.sampling.top_p = j["top_p"].get<float>();
        if (j.contains("top_k")) r.sampling.top_k = j["top_k"].get<int>();
        if (j.contains("seed")) r.sampling.seed = j["seed"].get<uint64_t>();
        if (j.contains("n")) r.sampling.n = j["n"].get<int>();
        if (j.contains("stop")) r.sampling.stop = j["stop"].is_string() ? std::vector<std::string>{j["stop"].get<std::string>()}
                                                                        : j["stop"].get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception& e) {
        fail("prompts line {}: {}", line, e.what());
    }
    return r;
}

std::vector<GenerationRequest> read_prompts(const std::string& path, const SamplingParams& defaults) {
    std::ifstream in(path);
    std::vector<GenerationRequest> out;
    std::string line;
    for (size_t n = 1; std::getline(in, line); ++n) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
            fail("{} line {} is not valid JSON ({})", path, n, e.what());
        }
        out.push_back(request_from_json(j, defaults, n));
    }
    DI_CHECK(!out.empty(), "{} holds no prompts", path);
    return out;
}

int stream_one(Engine& engine, GenerationRequest r) {
    auto stream = engine.submit(std::move(r));
    int status = 0;
    while (auto ev = stream->next()) {
        if (!ev->error.empty()) {
            std::cerr << "deepinfer: error: " << ev->error << "\n";
            status = 1;
        }
        for (const auto& s : ev->sequences) std::cout << s.text << std::flush;
    }
    std::cout << "\n";
    return status;
}

nlohmann::json result_json(size_t index, const GenerationRequest& r, RequestStream& stream) {
    std::vector<std::string> texts(r.sampling.n);
    std::vector<std::string> reasons(r.sampling.n);
    nlohmann::json out = {{"index", index}, {"prompt", r.prompt}};
    while (auto ev = stream.next()) {
        if (!ev->error.empty()) out["error"] = ev->error;
        for (const auto& s : ev->sequences) {
            texts[s.index] += s.text;
            if (s.finish != FinishReason::kNone) reasons[s.index] = finish_reason_name(s.finish);
        }
        out["prompt_tokens"] = ev->prompt_tokens;
        out["completion_tokens"] = ev->completion_tokens;
    }
    if (r.sampling.n == 1) {
        out["text"] = texts[0];
        out["finish_reason"] = reasons[0];
    } else {
        out["texts"] = texts;
        out["finish_reasons"] = reasons;
    }
    return out;
}

}  // namespace

int run_generate(GenerateOptions& o, const std::string& log_level) {
    SamplingParams sampling = o.sampling.finish();
    std::vector<GenerationRequest> requests;
    if (!o.prompts_file.empty()) {
        requests = read_prompts(o.prompts_file, sampling);
    } else {
        DI_CHECK(!o.prompt.empty(), "give --prompt TEXT or --prompts FILE.jsonl");
        requests.push_back({o.prompt, {}, sampling});
    }
    GrammarSpec grammar = o.grammar.finish();
    auto engine = Engine::create(finish_engine_config(o.engine, log_level));
    if (grammar.active()) {
        std::string bad = engine->check_grammar(grammar);
        DI_CHECK(bad.empty(), "{}: {}", o.grammar.json_schema_file.empty() ? (o.grammar.regex.empty() ? "--grammar" : "--regex") : "--json-schema", bad);
        for (auto& r : requests) r.grammar = grammar;
    }
    if (o.prompts_file.empty()) return stream_one(*engine, std::move(requests[0]));

    auto start = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (auto& r : requests) streams.push_back(engine->submit(r));
    std::ofstream file;
    if (!o.output_file.empty()) {
        file.open(o.output_file);
        DI_CHECK(file.good(), "cannot write {}", o.output_file);
    }
    std::ostream& out = o.output_file.empty() ? std::cout : file;
    ProgressBar bar(static_cast<int64_t>(requests.size()), "requests");
    int64_t tokens = 0, failed = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
        nlohmann::json j = result_json(i, requests[i], *streams[i]);
        tokens += j.value("completion_tokens", 0);
        failed += j.contains("error");
        out << j.dump() << "\n" << std::flush;
        bar.update(static_cast<int64_t>(i + 1), tokens);
    }
    bar.finish();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "%zu requests, %ld output tokens in %.2f s (after loading): %.1f output tokens/s\n", requests.size(),
                 static_cast<long>(tokens), secs, tokens / secs);
    return failed ? 1 : 0;
}

}  // namespace deepinfer::apps
