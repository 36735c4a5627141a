// Tokenizer encode throughput on the parity corpus (the same strings HF tokenizers was timed on
// by scripts/gen_tokenizer_vectors.py): one string at a time on one thread, and the corpus as one
// concatenated document. Prints MB/s (1 MB = 1e6 bytes of UTF-8 input).
#include <CLI/CLI.hpp>

#include <chrono>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
    CLI::App app{"Tokenizer encode throughput"};
    std::string tok_dir = "models/deepseek-v4-tokenizer", corpus = "tests/data/tokenizer_corpus.jsonl";
    app.add_option("--tokenizer", tok_dir);
    app.add_option("--corpus", corpus);
    CLI11_PARSE(app, argc, argv);
    auto tok = deepinfer::tokenizer::Tokenizer::from_dir(tok_dir);
    std::vector<std::string> texts;
    std::ifstream in(corpus);
    std::string line;
    while (std::getline(in, line)) {
        if (line.find("\"kind\": \"surrogate\"") != std::string::npos) continue;  // not UTF-8; HF refuses them too
        texts.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
    }
    size_t bytes = 0;
    for (const auto& t : texts) bytes += t.size();
    auto timed = [](auto&& f) {
        double best = 1e30;
        for (int rep = 0; rep < 5; ++rep) {
            auto t0 = std::chrono::steady_clock::now();
            f();
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return best;
    };
    size_t tokens = 0;
    double loop = timed([&] {
        tokens = 0;
        for (const auto& t : texts) tokens += tok->encode(t, false)->size();
    });
    std::string doc;
    for (const auto& t : texts) doc += t;
    double one = timed([&] { tok->encode(doc, false); });
    std::printf("deepinfer tokenizer encode: corpus %zu bytes, %zu strings, %zu tokens; single-thread loop %.2f MB/s, "
                "one concatenated document %.2f MB/s\n",
                bytes, texts.size(), tokens, bytes / loop / 1e6, doc.size() / one / 1e6);
    return 0;
}
