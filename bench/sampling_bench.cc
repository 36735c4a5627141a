// Backend::sample_rows on one device: the time to choose one token per row of --vocab random
// logits (129,280: DeepSeek-V4's vocabulary) and bring the ids back, per row count and parameter
// set, next to the time of bringing the rows themselves back (what sampling on the host needed
// before any sorting). Median of --reps calls, each ending with the ids on the host.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "kernels/backend.h"

namespace {

using namespace deepinfer;
using Clock = std::chrono::steady_clock;

template <typename F>
double median_us(int reps, F&& f) {
    for (int i = 0; i < 3; ++i) f();  // warm-up: allocations, first launches
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        auto t0 = Clock::now();
        f();
        t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

struct ParameterSet {
    const char* name;
    kernels::SampleRow row;
    bool penalties = false, bias = false;
};

std::vector<ParameterSet> parameter_sets() {
    kernels::SampleRow greedy, plain, top_p, top_k_p, min_p, penalized, logprobs;
    greedy.temperature = 0.0f;
    top_p.top_p = 0.9f;
    top_k_p.top_k = 50, top_k_p.top_p = 0.95f;
    min_p.min_p = 0.05f;
    penalized.repetition_penalty = 1.1f, penalized.frequency_penalty = 0.2f, penalized.top_p = 0.9f;
    logprobs.logprobs = 20;
    return {{"greedy", greedy},        {"temperature 1", plain},     {"top_p 0.9", top_p}, {"top_k 50 top_p 0.95", top_k_p},
            {"min_p 0.05", min_p},     {"penalties + bias, top_p 0.9", penalized, true, true},
            {"logprobs 20", logprobs}};
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Device sampling benchmark"};
    std::string device = "cuda";
    int64_t vocab = 129280;
    std::vector<int64_t> row_counts = {1, 8, 64};
    int reps = 50;
    bool json = false;
    app.add_option("--device", device);
    app.add_option("--vocab", vocab);
    app.add_option("--rows", row_counts, "rows per call")->delimiter(',');
    app.add_option("--reps", reps);
    app.add_flag("--json", json, "one JSON object per line");
    CLI11_PARSE(app, argc, argv);
    auto backend = kernels::make_backend(device);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (int64_t rows : row_counts) {
        Tensor host = Tensor::empty(DType::kF32, {rows, vocab});
        for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = normal(rng);
        Tensor logits = backend->upload(host), tokens = backend->empty(DType::kI32, {rows});
        Tensor state = backend->zeros(DType::kI32, {rows, vocab});
        Tensor lp = backend->empty(DType::kF32, {rows}), top = backend->empty(DType::kI32, {rows, 20}),
               top_lp = backend->empty(DType::kF32, {rows, 20});
        std::vector<int32_t> history(512), ids(static_cast<size_t>(rows));
        for (int32_t& t : history) t = static_cast<int32_t>(rng() % vocab);
        for (int64_t r = 0; r < rows; ++r) backend->reset_penalties(state, static_cast<int32_t>(r), history, history);
        std::vector<kernels::LogitBias> bias;
        for (int i = 0; i < 10; ++i) bias.push_back({static_cast<int32_t>(i * (vocab / 10)), i % 2 ? 3.0f : -3.0f});
        std::vector<float> rows_back(static_cast<size_t>(host.numel()));
        double download = median_us(reps, [&] { backend->download(logits, rows_back.data()); });
        for (const ParameterSet& set : parameter_sets()) {
            std::vector<kernels::SampleRow> params(static_cast<size_t>(rows), set.row);
            for (int64_t r = 0; r < rows; ++r) {
                params[r].penalty_slot = set.penalties ? static_cast<int32_t>(r) : -1;
                params[r].bias_count = set.bias ? static_cast<int32_t>(bias.size()) : 0;
            }
            int64_t position = 0;
            double us = median_us(reps, [&] {
                for (auto& p : params) p.position = position++;
                backend->sample_rows({logits, params, bias, state, tokens, lp, top, top_lp});
                backend->download(tokens, ids.data());
            });
            if (json)
                std::printf("%s\n", nlohmann::json{{"device", device}, {"vocab", vocab}, {"rows", rows}, {"parameters", set.name},
                                                   {"sample_us", us}, {"download_rows_us", download}}.dump().c_str());
            else
                std::printf("%-6s vocab %ld rows %3ld  %-30s sample + ids back %9.1f us   (rows back: %9.1f us)\n",
                            device.c_str(), static_cast<long>(vocab), static_cast<long>(rows), set.name, us, download);
        }
    }
    return 0;
}
