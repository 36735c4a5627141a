// `deepinfer eval`: perplexity and bits per byte of a model over text (files, JSONL) or token
// rows, and its logits against a reference file (max |Δ|, KL, top-1 agreement).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include <fmt/ranges.h>

#include "apps/commands.h"
#include "apps/progress.h"
#include "base/error.h"
#include "core/safetensors.h"
#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "runtime/sequence_logits.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::apps {

void add_eval_command(CLI::App& app, EvalOptions& o) {
    auto* cmd = app.add_subcommand("eval", "Perplexity and bits per byte over text or token rows, or logits against a "
                                           "reference file");
    cmd->add_option("--model", o.model_dir, "HF model directory (default: the bundled model)")->check(CLI::ExistingDirectory);
    cmd->add_option("--tokenizer", o.tokenizer_dir, "directory with tokenizer.json (default: the model's)");
    auto* text = cmd->add_option("--text", o.text_files, "text files, each one document")->check(CLI::ExistingFile);
    auto* jsonl = cmd->add_option("--jsonl", o.jsonl_file, "JSONL file, one document per line")->check(CLI::ExistingFile);
    cmd->add_option("--field", o.field, "the JSONL field holding a document's text (default: text)");
    auto* tokens = cmd->add_option("--tokens", o.tokens_file, "safetensors with int64 input_ids [N, L]: N token rows")
                       ->check(CLI::ExistingFile);
    auto* compare = cmd->add_option("--compare", o.compare_file,
                                    "safetensors with the reference's float32 logits [L, vocab] (and input_ids unless --input)")
                        ->check(CLI::ExistingFile);
    cmd->add_option("--input", o.input_file, "safetensors with int64 input_ids [L] for --compare")->check(CLI::ExistingFile);
    cmd->add_option("--context", o.context, "tokens per forward pass; longer documents are scored in windows that "
                                            "overlap by half (default 1024)")
        ->check(CLI::Range(2, 1 << 20));
    cmd->add_option("--json", o.json_file, "write the results as JSON to this file");
    add_model_run_options(cmd, o.run);
    text->excludes(jsonl)->excludes(tokens)->excludes(compare);
    jsonl->excludes(tokens)->excludes(compare);
    tokens->excludes(compare);
}

namespace {

struct Document {
    std::vector<int32_t> ids;  // the first is context only (BOS, or a row's first token)
    int64_t bytes = -1;        // UTF-8 bytes of the scored text (-1: unknown)
};

struct Score {
    int64_t documents = 0, tokens = 0, bytes = 0;
    bool bytes_known = true;
    double nll = 0;  // nats, summed over the scored tokens
};

// log sum exp(row), in double: log softmax(row)[v] = row[v] - log_normalizer(row).
double log_normalizer(const float* row, int64_t vocab) {
    double mx = *std::max_element(row, row + vocab), z = 0;
    for (int64_t v = 0; v < vocab; ++v) z += std::exp(row[v] - mx);
    return mx + std::log(z);
}

// -log softmax(row)[target].
double token_nll(const float* row, int64_t vocab, int32_t target) { return log_normalizer(row, vocab) - row[target]; }

// Scores tokens 1.. of `ids`, each once: windows of `context` tokens, each after the first
// starting half a window back so that every scored token sees at least that much context.
double document_nll(model::CausalLm& m, const std::vector<int32_t>& ids, int64_t context) {
    int64_t n = static_cast<int64_t>(ids.size()), vocab = m.vocab_size(), scored_until = 1, start = 0;
    double nll = 0;
    while (scored_until < n) {
        int64_t end = std::min(n, start + context);
        std::vector<int32_t> window(ids.begin() + start, ids.begin() + end);
        Tensor logits = runtime::sequence_logits(m, window, {});
        for (int64_t t = std::max(scored_until, start + 1); t < end; ++t)
            nll += token_nll(logits.data<float>() + (t - 1 - start) * vocab, vocab, ids[static_cast<size_t>(t)]);
        scored_until = end;
        start = end - context / 2;
    }
    return nll;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    DI_CHECK(in.good(), "cannot read {}", path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

Document text_document(const tokenizer::Tokenizer& tok, const std::string& text, const std::string& where) {
    auto ids = tok.encode(text, true);
    DI_CHECK(ids.ok(), "{}: {}", where, ids.status().message());
    Document d{std::move(ids).value(), static_cast<int64_t>(text.size())};
    if (d.ids.empty() || d.ids[0] != *tok.bos_id()) d.ids.insert(d.ids.begin(), *tok.bos_id());  // so the first text token is scored
    return d;
}

std::vector<Document> jsonl_documents(const tokenizer::Tokenizer& tok, const std::string& path, const std::string& field) {
    std::ifstream in(path);
    DI_CHECK(in.good(), "cannot read {}", path);
    std::vector<Document> docs;
    std::string line;
    for (int no = 1; std::getline(in, line); ++no) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        std::string where = path + ":" + std::to_string(no);
        nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        DI_CHECK(!j.is_discarded() && j.is_object(), "{}: not a JSON object", where);
        DI_CHECK(j.contains(field) && j[field].is_string(), "{}: no string field \"{}\"", where, field);
        docs.push_back(text_document(tok, j[field].get<std::string>(), where));
    }
    DI_CHECK(!docs.empty(), "{} holds no documents", path);
    return docs;
}

std::vector<Document> token_documents(const std::string& path, const tokenizer::Tokenizer* tok, int64_t vocab) {
    InputIds t = read_input_id_tensor(path);
    DI_CHECK(t.shape.size() == 2 && t.shape[1] >= 2, "{}: input_ids must be int64 [N, L] with L >= 2, got [{}]", path,
             fmt::join(t.shape, ", "));
    int64_t rows = t.shape[0], len = t.shape[1];
    std::vector<Document> docs(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        Document& d = docs[static_cast<size_t>(r)];
        d.ids.assign(t.ids.begin() + r * len, t.ids.begin() + (r + 1) * len);
        for (int64_t c = 0; c < len; ++c)
            DI_CHECK(d.ids[c] < vocab, "{}: input_ids[{}, {}] = {} is not a token id of the model", path, r, c, d.ids[c]);
        if (tok) d.bytes = static_cast<int64_t>(tok->decode(std::span(d.ids).subspan(1)).size());
    }
    return docs;
}

std::vector<Document> documents(const EvalOptions& o, const std::string& model_dir, int64_t vocab) {
    std::string tok_dir = o.tokenizer_dir.empty() ? model_dir : o.tokenizer_dir;
    bool has_tokenizer = std::ifstream(tok_dir + "/tokenizer.json").good();
    DI_CHECK(has_tokenizer || !o.tokens_file.empty(), "text needs a tokenizer: {} has no tokenizer.json", tok_dir);
    std::shared_ptr<tokenizer::Tokenizer> tok = has_tokenizer ? tokenizer::Tokenizer::from_dir(tok_dir) : nullptr;
    if (!o.tokens_file.empty()) return token_documents(o.tokens_file, tok.get(), vocab);
    DI_CHECK(tok->bos_id().has_value(), "the tokenizer has no BOS token to start documents with");
    if (!o.jsonl_file.empty()) return jsonl_documents(*tok, o.jsonl_file, o.field);
    std::vector<Document> docs;
    for (const std::string& f : o.text_files) docs.push_back(text_document(*tok, read_file(f), f));
    return docs;
}

void finish(const EvalOptions& o, const nlohmann::json& result) {
    std::cout << result.dump(2) << "\n";
    if (o.json_file.empty()) return;
    std::ofstream out(o.json_file);
    out << result.dump(2) << "\n";
    DI_CHECK(out.good(), "cannot write {}", o.json_file);
}

int run_perplexity(const EvalOptions& o, const std::string& model_dir, model::CausalLm& m) {
    std::vector<Document> docs = documents(o, model_dir, m.vocab_size());
    Score s;
    ProgressBar bar(static_cast<int64_t>(docs.size()), "documents");
    for (const Document& d : docs) {
        s.nll += document_nll(m, d.ids, o.context);
        s.tokens += static_cast<int64_t>(d.ids.size()) - 1;
        s.bytes_known = s.bytes_known && d.bytes >= 0;
        s.bytes += std::max<int64_t>(d.bytes, 0);
        bar.update(++s.documents, s.tokens);
    }
    bar.finish();
    DI_CHECK(s.tokens > 0, "nothing to score: every document is a single token");
    nlohmann::json r = {{"model", model_dir}, {"documents", s.documents}, {"tokens", s.tokens}, {"context", o.context},
                        {"nll", s.nll}, {"mean_nll", s.nll / s.tokens}, {"perplexity", std::exp(s.nll / s.tokens)},
                        {"bits_per_token", s.nll / s.tokens / std::log(2.0)}};
    r["bytes"] = s.bytes_known ? nlohmann::json(s.bytes) : nlohmann::json();
    r["bits_per_byte"] = s.bytes_known && s.bytes > 0 ? nlohmann::json(s.nll / std::log(2.0) / s.bytes) : nlohmann::json();
    finish(o, r);
    return 0;
}

int run_compare(const EvalOptions& o, const std::string& model_dir, model::CausalLm& m) {
    SafetensorsFile ref(o.compare_file);
    DI_CHECK(ref.contains("logits"), "{} has no tensor named logits", o.compare_file);
    Tensor want = ref.tensor("logits");
    std::vector<int32_t> ids = read_input_ids(o.input_file.empty() ? o.compare_file : o.input_file);
    int64_t n = static_cast<int64_t>(ids.size()), vocab = m.vocab_size();
    DI_CHECK(want.dtype() == DType::kF32 && want.ndim() == 2 && want.dim(0) == n && want.dim(1) == vocab,
             "{}: logits must be float32 [{}, {}] (the input's length, the model's vocabulary), got {} {}", o.compare_file, n,
             vocab, dtype_name(want.dtype()), want.shape_string());
    Tensor got = runtime::sequence_logits(m, ids, {});
    double max_abs = 0, kl_sum = 0, kl_max = 0;
    int64_t agree = 0;
    for (int64_t t = 0; t < n; ++t) {
        const float* a = want.data<float>() + t * vocab;
        const float* b = got.data<float>() + t * vocab;
        double kl = 0, norm_a = log_normalizer(a, vocab), norm_b = log_normalizer(b, vocab);
        for (int64_t v = 0; v < vocab; ++v) {  // KL(reference || ours)
            max_abs = std::max(max_abs, std::fabs(static_cast<double>(a[v]) - b[v]));
            double la = a[v] - norm_a, lb = b[v] - norm_b;
            kl += std::exp(la) * (la - lb);
        }
        kl_sum += kl, kl_max = std::max(kl_max, kl);
        agree += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
    }
    finish(o, {{"model", model_dir}, {"positions", n}, {"max_abs_diff", max_abs}, {"mean_kl", kl_sum / n},
               {"max_kl", kl_max}, {"top1_agreement", static_cast<double>(agree) / n}});
    return 0;
}

}  // namespace

int run_eval(const EvalOptions& o) {
    bool text = !o.text_files.empty() || !o.jsonl_file.empty() || !o.tokens_file.empty();
    DI_CHECK(text || !o.compare_file.empty(), "eval needs --text, --jsonl, --tokens or --compare");
    DI_CHECK(o.input_file.empty() || !o.compare_file.empty(), "--input goes with --compare");
    std::string model_dir = o.model_dir.empty() ? default_model_dir() : o.model_dir;
    auto backend = kernels::make_backend(o.run.device, o.run.threads);
    auto m = load_model(model_dir, *backend, o.run);
    return text ? run_perplexity(o, model_dir, *m) : run_compare(o, model_dir, *m);
}

}  // namespace deepinfer::apps
