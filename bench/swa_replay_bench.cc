// SWA bounded replay on a DeepSeek-V4.1 checkpoint: how far the logits move from a full prefill
// for several replay lengths K, and the prefill work the replay saves.
//   decoder replay: a prompt of L tokens is prefilled with the layers after the last KV source
//     run on its last K tokens only; then D tokens are decoded (teacher-forced).
//   encoder replay: a prefix of L tokens is prefilled in full, its window rings are dropped (a
//     prefix hit that stored only compressed KV), the rings are rebuilt from the last K tokens,
//     then D tokens are decoded.
// Each configuration's L + D logits rows are compared with one full forward of the same tokens.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "core/safetensors.h"
#include "kernels/backend.h"
#include "model/archs/deepseek_v41.h"
#include "runtime/sequence_logits.h"

namespace {

using namespace deepinfer;

struct Diff {
    double max_abs = 0.0, max_ref = 0.0;
    int same_argmax = 0, rows = 0;
};

int64_t argmax(const float* row, int64_t n) { return std::max_element(row, row + n) - row; }

void compare_row(const float* got, const float* ref, int64_t vocab, Diff& d) {
    for (int64_t v = 0; v < vocab; ++v) {
        d.max_abs = std::max(d.max_abs, std::fabs(static_cast<double>(got[v]) - ref[v]));
        d.max_ref = std::max(d.max_ref, std::fabs(static_cast<double>(ref[v])));
    }
    d.same_argmax += argmax(got, vocab) == argmax(ref, vocab);
    ++d.rows;
}

struct Run {
    model::DeepseekV41Model& m;
    const std::vector<int32_t>& tokens;
    int64_t prompt, decode;
    const Tensor& reference;  // [prompt + decode, vocab] from one full forward
};

model::Batch one_step(const std::vector<int32_t>& tokens, int64_t begin, int64_t count, int state, int64_t prompt) {
    model::Batch b;
    b.append(tokens, begin, static_cast<int32_t>(count), state);
    b.logit_rows.push_back(static_cast<int32_t>(count) - 1);
    b.prompt_lengths.push_back(prompt);
    return b;
}

// Decodes the D tokens after the prompt (teacher-forced) and compares every row's logits.
void decode_and_compare(const Run& r, model::HybridCache& cache, int state, const Tensor& last_prompt_logits, Diff& d) {
    int64_t vocab = r.reference.dim(1);
    compare_row(last_prompt_logits.data<float>(), r.reference.data<float>() + (r.prompt - 1) * vocab, vocab, d);
    for (int64_t i = 0; i + 1 < r.decode + 1 && r.prompt + i < static_cast<int64_t>(r.tokens.size()); ++i) {
        Tensor l = r.m.forward(one_step(r.tokens, r.prompt + i, 1, state, r.prompt), cache);
        compare_row(l.data<float>(), r.reference.data<float>() + (r.prompt + i) * vocab, vocab, d);
    }
}

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

Diff decoder_replay(const Run& r, int k, int rollback, double& prefill_s) {
    r.m.configure_swa_replay(k, rollback);
    model::HybridCache cache(r.m.cache_layout(), r.m.backend(), r.m.plan_cache_for_tokens(1, r.prompt + r.decode + 1, 16));
    int state = cache.add_sequence();
    cache.reserve(state, r.prompt + r.decode + 1);
    Tensor logits;
    prefill_s = std::numeric_limits<double>::infinity();
    for (int rep = 0; rep < 3; ++rep) {  // best of three; each rewrites the same positions
        auto t0 = std::chrono::steady_clock::now();
        logits = r.m.forward(one_step(r.tokens, 0, r.prompt, state, r.prompt), cache);
        prefill_s = std::min(prefill_s, seconds_since(t0));
    }
    Diff d;
    decode_and_compare(r, cache, state, logits, d);
    r.m.configure_swa_replay(0, 0);
    return d;
}

Diff encoder_replay(const Run& r, int k) {
    model::HybridCache cache(r.m.cache_layout(), r.m.backend(), r.m.plan_cache_for_tokens(1, r.prompt + r.decode + 1, 16));
    int state = cache.add_sequence();
    cache.reserve(state, r.prompt + r.decode + 1);
    Tensor logits = r.m.forward(one_step(r.tokens, 0, r.prompt, state, r.prompt), cache);
    for (int l = 0; l < r.m.config().base.num_hidden_layers; ++l) {  // the rings were not stored
        Tensor ring = cache.layer(l).ring;
        int64_t per_state = ring.numel() / ring.dim(0);
        std::fill_n(ring.data<float>() + state * per_state, per_state, std::numeric_limits<float>::quiet_NaN());
    }
    int64_t from = std::max<int64_t>(0, r.prompt - k);
    r.m.rebuild_windows(one_step(r.tokens, from, r.prompt - from, state, r.prompt), cache);
    Diff d;
    decode_and_compare(r, cache, state, logits, d);
    return d;
}

void print_row(const char* form, const std::string& k_name, const Diff& d, const std::string& extra) {
    std::printf("| %s | %s | %.3g | %.2e | %d/%d | %s |\n", form, k_name.c_str(), d.max_abs, d.max_abs / d.max_ref,
                d.same_argmax, d.rows, extra.c_str());
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"SWA bounded replay: logit error and prefill work saved (DeepSeek-V4.1)"};
    std::string dir;
    int64_t prompt = 400, decode = 32;
    int rollback = 5;
    app.add_option("--model", dir, "DeepSeek-V4.1 checkpoint directory")->required();
    app.add_option("--prompt", prompt, "prompt length L (the fixture's ids, then random tokens)");
    app.add_option("--decode", decode, "tokens decoded after the prompt");
    app.add_option("--rollback", rollback, "rollback depth added to the window for the second K");
    CLI11_PARSE(app, argc, argv);
    try {
        auto backend = kernels::make_cpu_backend(0);
        model::DeepseekV41Model m(dir, *backend);
        const auto& c = m.config();
        std::vector<int32_t> tokens;
        SafetensorsFile ref(dir + "/reference.safetensors");
        Tensor ids = ref.tensor("input_ids");
        for (int64_t i = 0; i < ids.numel(); ++i) tokens.push_back(static_cast<int32_t>(ids.data<int64_t>()[i]));
        std::mt19937 rng(7);
        while (static_cast<int64_t>(tokens.size()) < prompt + decode) tokens.push_back(static_cast<int32_t>(rng() % c.base.vocab_size));
        tokens.resize(prompt + decode);
        Tensor reference = runtime::sequence_logits(m, tokens, {});
        Run run{m, tokens, prompt, decode, reference};
        int window = c.base.sliding_window, late = c.base.num_hidden_layers - (*std::max_element(c.kv_source_layer_ids.begin(), c.kv_source_layer_ids.end()) + 1);
        std::printf("%s: %d layers (%d after the last KV source), window %d, prompt %ld, decode %ld\n\n", dir.c_str(),
                    c.base.num_hidden_layers, late, window, static_cast<long>(prompt), static_cast<long>(decode));
        std::printf("| form | K | max abs diff | / max abs ref | argmax equal | prefill work saved (time) |\n|---|---|---|---|---|---|\n");
        double full_s = 0.0;
        decoder_replay(run, 0, 0, full_s);
        std::vector<std::pair<std::string, int>> ks = {{"window = " + std::to_string(window), window},
                                                       {"window + rollback = " + std::to_string(window + rollback), window + rollback},
                                                       {"140", 140}, {"full (" + std::to_string(prompt) + ")", static_cast<int>(prompt)}};
        for (const auto& [name, k] : ks) {
            double s = 0.0;
            Diff d = decoder_replay(run, k, k == window ? 0 : rollback, s);
            double saved = static_cast<double>(late) * std::max<int64_t>(0, prompt - k) / (c.base.num_hidden_layers * prompt);
            char extra[96];
            std::snprintf(extra, sizeof extra, "%.1f%% of layer-tokens (%.1f ms vs %.1f ms)", 100 * saved, 1e3 * s, 1e3 * full_s);
            print_row("decoder", name, d, extra);
        }
        for (const auto& [name, k] : ks) print_row("encoder", name, encoder_replay(run, k), "");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_swa_replay: %s\n", e.what());
        return 1;
    }
    return 0;
}
