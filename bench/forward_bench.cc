// Forward-pass throughput of a DeepSeek-V4 checkpoint on the CPU or a GPU (--device) next to the
// device's memory-bandwidth and GEMM floors, measured in the same run:
//   prefill: tokens/s for single prompts of the given lengths (logits of the last token);
//   decode:  tokens/s at each batch size (every sequence prefilled first), and the floor =
//            bytes the step must read (weights it touches + KV) / measured read bandwidth (host)
//            or copy bandwidth (device).
// Every step ends with the logits on the host, as in the engine, so device timings are synchronous.
// --variant sets (kernel knobs, deepinfer/kernel_config.h) time kernel choices against each other
// in one process.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <regex>
#include <sstream>

#include "base/error.h"
#include "base/host_allocator.h"
#include "base/thread_pool.h"
#include "core/quant_fp8.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"
#include "model/archs/deepseek_v4.h"
#include "model/config_file.h"

namespace {

using namespace deepinfer;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Best-of-5 read bandwidth (bytes/s) of all threads summing a buffer far larger than the caches.
double read_bandwidth(ThreadPool& pool, size_t bytes) {
    size_t n = bytes / sizeof(float);
    // Same kind of memory the weights live in (huge-page heap), so the floor is comparable.
    std::shared_ptr<float> mem(static_cast<float*>(aligned_host_alloc(bytes)), [](float* p) { std::free(p); });
    float* buf = mem.get();
    std::fill(buf, buf + n, 1.0f);
    double best = 0;
    std::vector<double> sums(pool.num_threads());
    for (int rep = 0; rep < 5; ++rep) {
        auto t0 = Clock::now();
        pool.parallel_for(static_cast<int64_t>(n), 1 << 16, [&](int64_t b, int64_t e) {
            float acc[16] = {};
            for (int64_t i = b; i + 16 <= e; i += 16)
                for (int j = 0; j < 16; ++j) acc[j] += buf[i + j];
            sums[b * pool.num_threads() / n] = std::accumulate(acc, acc + 16, 0.0);
        });
        best = std::max(best, bytes / seconds_since(t0));
    }
    return best;
}

// Best-of-3 rate (FLOP/s) of the GEMM kernel on a prefill-shaped bf16 product over all threads.
double gemm_flops(ThreadPool& pool) {
    int64_t m = 128, n = 4096, k = 1024;
    std::vector<float> x(m * k, 0.01f), y(m * n);
    std::vector<uint16_t> w(n * k, f32_to_bf16(0.02f));
    kernels::cpu::GemmArgs a{.x = x.data(), .lda = k, .w = w.data(), .ldw = k, .w_dtype = DType::kBF16, .y = y.data(),
                             .ldy = n, .m = m, .n = n, .k = k};
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
        auto t0 = Clock::now();
        kernels::cpu::gemm(pool, detect_isa(), a);
        best = std::min(best, seconds_since(t0));
    }
    return 2.0 * m * n * k / best;
}

// A GPU's copy bandwidth (bytes/s): the better of a device-to-device copy (reads 1, writes 1
// buffer) and the backend's own `add` (reads 2, writes 1), each the best of 5. The copy engine's
// path measured ~20% above `add` on an H200, so the floor takes the higher of the two.
double device_bandwidth(kernels::Backend& b) {
    int64_t n = int64_t{1} << 27;  // 512 MiB per fp32 buffer
    Tensor x = b.zeros(DType::kF32, {n}), y = b.zeros(DType::kF32, {n});
    float probe = 0;
    auto best_of_5 = [&](auto&& op) {
        double best = 1e30;
        for (int rep = 0; rep < 5; ++rep) {
            auto t0 = Clock::now();
            op();
            b.download(y.rows(0, 1), &probe);
            best = std::min(best, seconds_since(t0));
        }
        return best;
    };
    double add_rate = 3.0 * n * 4 / best_of_5([&] { b.add(x, y); });
    double copy_rate = 2.0 * n * 4 / best_of_5([&] { b.copy(x, y); });
    std::printf("device bandwidth: copy %.1f GB/s, add %.1f GB/s\n", copy_rate / 1e9, add_rate / 1e9);
    return std::max(add_rate, copy_rate);
}

// The backend's matmul rate (FLOP/s) on a 4096³ product with bf16 weights.
double device_gemm_flops(kernels::Backend& b) {
    int64_t m = 4096;
    std::mt19937 rng(1);
    Tensor hx = Tensor::empty(DType::kF32, {m, m}), hw = Tensor::empty(DType::kBF16, {m, m});
    for (int64_t i = 0; i < m * m; ++i) {
        hx.data<float>()[i] = static_cast<float>(rng() % 1000) / 1000.0f;
        hw.data<uint16_t>()[i] = static_cast<uint16_t>(0x3c00 + rng() % 128);  // bf16 in [2^-7, 2^-6)
    }
    Tensor x = b.upload(hx), w = b.upload(hw), y = b.empty(DType::kF32, {m, m});
    float probe = 0;
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
        auto t0 = Clock::now();
        b.matmul(x, w, y);
        b.download(y.reshape({m * m}).rows(0, 1), &probe);
        best = std::min(best, seconds_since(t0));
    }
    return 2.0 * m * m * m / best;
}

struct WeightBytes {
    double dense = 0;         // read once per step whatever the batch
    double per_expert = 0;    // one routed expert of one layer
    double embed_row = 0;
    double head = 0;
    double dense_params = 0, expert_params = 0, head_params = 0;  // matmul parameters (for FLOPs)
};

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Bytes of a checkpoint tensor as the loader keeps it in memory (model/weight_loader.h): FP8
// matrices widen to bf16 unless kept (a byte per value and one per 32), packed FP4 ones too unless
// kept (20 bytes per 32 values), fp16 to fp32, Q8 re-encodes linear weights at 36 bytes per 32
// values; block scales are folded in.
// Parameters counted from the shape.
std::pair<double, double> loaded_bytes(const std::string& name, const SafetensorsEntry& e, model::WeightQuant quant,
                                       model::KeptFormats kept) {
    if (e.dtype == DType::kF8E8M0 || ends_with(name, "_scale_inv") || ends_with(name, ".scale")) return {0.0, 0.0};
    double params = 1;
    for (int64_t d : e.shape) params *= static_cast<double>(d);
    bool matrix = e.shape.size() >= 2;
    if (matrix && (e.dtype == DType::kI8 || e.dtype == DType::kU8)) params *= 2;  // two FP4 codes a byte
    bool router = ends_with(name, "gate.weight") && name.find("expert") == std::string::npos;
    bool stays = name.find("embed") != std::string::npos || router;  // see WeightLoader::linear
    double size = !matrix || e.dtype == DType::kF32 || e.dtype == DType::kF16 ? 4.0 : 2.0;
    bool fp4 = matrix && (e.dtype == DType::kI8 || e.dtype == DType::kU8);
    bool fp8 = matrix && e.dtype == DType::kF8E4M3 && !stays;
    if (fp4 && kept.mxfp4)
        size = 20.0 / 32.0;
    else if (fp8 && kept.fp8)  // as the releases' power-of-two scales allow (fp8::packable)
        size = 1.0 + 1.0 / fp8::kScaleColumns;
    else if (matrix && quant == model::WeightQuant::kQ8 && !stays)
        size = 36.0 / 32.0;
    return {params * size, params};
}

WeightBytes weight_bytes(const model::Checkpoint& ckpt, const model::DeepseekV4Config& c, model::WeightQuant quant,
                         model::KeptFormats kept) {
    WeightBytes w;
    std::regex expert(R"(\.experts\.\d+\.)");
    double experts_total = 0;
    double expert_params = 0;
    for (const auto& name : ckpt.names()) {
        const SafetensorsEntry& e = ckpt.entry(name);
        auto [b, params] = loaded_bytes(name, e, quant, kept);
        bool matrix = e.shape.size() >= 2;
        if (name.find("embed") != std::string::npos) {
            w.embed_row = b / c.vocab_size;
        } else if (name == "head.weight" || name == "lm_head.weight") {
            w.head = b;
            w.head_params = params;
        } else if (std::regex_search(name, expert)) {
            experts_total += b;
            expert_params += params;
        } else if (name.find("tid2eid") == std::string::npos) {
            w.dense += b;
            if (matrix) w.dense_params += params;
        }
    }
    w.per_expert = experts_total / (c.num_hidden_layers * c.n_routed_experts);
    w.expert_params = expert_params / (c.num_hidden_layers * c.n_routed_experts);
    return w;
}

struct Session {
    model::DeepseekV4Model& m;
    model::HybridCache cache;
    std::vector<int> states;
    std::vector<int64_t> lengths;
};

Tensor step(Session& s, const std::vector<std::vector<int32_t>>& tokens) {
    model::Batch st;
    for (size_t i = 0; i < tokens.size(); ++i) {
        int32_t begin = static_cast<int32_t>(st.token_ids.size());
        st.token_ids.insert(st.token_ids.end(), tokens[i].begin(), tokens[i].end());
        st.seqs.push_back({begin, static_cast<int32_t>(tokens[i].size()), s.lengths[i], s.states[i]});
        s.lengths[i] += static_cast<int64_t>(tokens[i].size());
        if (!s.cache.reserve(s.states[i], s.lengths[i])) throw std::runtime_error("cache full");
        st.logit_rows.push_back(static_cast<int32_t>(st.token_ids.size()) - 1);
    }
    Tensor logits = s.m.forward(st, s.cache);
    std::vector<float> host(static_cast<size_t>(logits.numel()));
    s.m.backend().download(logits, host.data());
    return logits;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n, int64_t vocab) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
    return t;
}

// Median wall time of `steps` decode steps of `tokens` random tokens per sequence (more than one:
// a speculative verification step, the sequence's last token and its drafts).
double median_decode_step(Session& s, int batch, int steps, int64_t vocab, std::mt19937& rng, int tokens = 1) {
    std::vector<double> times;
    for (int i = 0; i < steps; ++i) {
        std::vector<std::vector<int32_t>> next;
        for (int j = 0; j < batch; ++j) next.push_back(random_tokens(rng, tokens, vocab));
        auto t0 = Clock::now();
        step(s, next);
        times.push_back(seconds_since(t0));
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

// What a decode step of `batch` sequences must read and compute, and the time that takes at the
// measured bandwidth / GEMM rate (whichever is longer).
struct DecodeFloor {
    double bytes, flops, bw, gemm_rate;
    double seconds() const { return std::max(bytes / bw, flops / gemm_rate); }
};

DecodeFloor decode_floor(const model::DeepseekV4Config& cfg, const WeightBytes& wb, int batch, int context, double bw,
                         double gemm_rate) {
    double k = cfg.num_experts_per_tok, e = cfg.n_routed_experts;
    double experts_touched = e * (1.0 - std::pow(1.0 - k / e, batch));  // expected distinct experts, uniform routing
    double kv = batch * cfg.num_hidden_layers * (cfg.sliding_window + (context + 0.0) / 4) * cfg.head_dim * 4.0;
    double bytes = wb.dense + wb.head + batch * wb.embed_row + cfg.num_hidden_layers * experts_touched * wb.per_expert + kv;
    double attention = 4.0 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim *
                       (cfg.sliding_window + context / 4.0);  // q·k and p·v per token
    double flops = batch * (2.0 * (wb.dense_params + k * wb.expert_params + wb.head_params) + attention);
    return {bytes, flops, bw, gemm_rate};
}

// One more decode step with per-op timing; the wall time beside it shows what profiling costs.
void print_step_profile(Session& s, int batch, int64_t vocab, std::mt19937& rng) {
    std::vector<std::vector<int32_t>> next;
    for (int j = 0; j < batch; ++j) next.push_back(random_tokens(rng, 1, vocab));
    s.m.backend().execution().set_profiling(true);
    auto t0 = Clock::now();
    step(s, next);
    double wall = seconds_since(t0);
    s.m.backend().execution().set_profiling(false);
    std::printf("profile of one decode step, batch %d (wall %.2f ms while profiling):\n%s", batch, wall * 1e3,
                s.m.backend().execution().profile_report().c_str());
}

}  // namespace

// A set of kernel knobs (--variant name=value,name=value) on top of the defaults, and how the
// rows name it.
struct VariantSet {
    KernelConfig kernels;
    std::string label;
};

// The sets named on the command line (none: one empty set, the backend's defaults), each
// checked against the knob table and the backend once.
std::vector<VariantSet> parse_variant_sets(const std::vector<std::string>& args, kernels::Backend& backend) {
    std::vector<VariantSet> sets;
    for (const std::string& arg : args) {
        DI_CHECK(backend.execution().set_kernels(KernelConfig{}), "--variant: the {} backend has no kernel choices",
                 backend.name());
        VariantSet set;
        std::stringstream items(arg);
        for (std::string item, why; std::getline(items, item, ',');)
            DI_CHECK(parse_kernel_knob(set.kernels, item, &why), "--variant: {}", why);
        set.label = " [" + arg + "]";
        sets.push_back(std::move(set));
    }
    if (sets.empty()) sets.emplace_back();
    return sets;
}

void apply(const VariantSet& set, kernels::Backend& backend) { backend.execution().set_kernels(set.kernels); }

int run(int argc, char** argv) {
    CLI::App app{"Forward benchmark for DeepSeek-V4 checkpoints"};
    std::string dir, device = "cpu";
    int threads = 0, decode_steps = 16, context = 128;
    bool profile = false;
    std::vector<int> prompts = {128, 512}, batches = {1, 4}, verify = {1};
    app.add_option("--model", dir)->required();
    app.add_option("--threads", threads);
    app.add_option("--device", device, "cpu, cuda or cuda:N");
    std::string quantize;
    app.add_option("--quantize", quantize, "re-encode weights at load: none, or q8 (8-bit blocks; CPU)")
        ->check(CLI::IsMember({"none", "q8"}));
    std::string precision;
    app.add_option("--precision", precision, "matrix products: exact, fast (bf16 activations) or auto")
        ->check(CLI::IsMember({"auto", "exact", "fast"}));
    app.add_option("--prompt", prompts, "prefill lengths")->delimiter(',');
    app.add_option("--batch", batches, "decode batch sizes")->delimiter(',');
    app.add_option("--decode-steps", decode_steps);
    app.add_option("--verify-tokens", verify,
                   "tokens per sequence and decode step (above 1: speculative verification of that many - 1 drafts; "
                   "the step rate at each is the verify cost SPS(B))")
        ->delimiter(',')
        ->check(CLI::Range(1, 64));
    app.add_option("--context", context, "tokens prefilled before decode");
    std::string deterministic = "off";
    app.add_option("--deterministic", deterministic,
                   "batch-invariant kernels (what --deterministic engines run): off, on or both (each row timed in both "
                   "modes, one after the other)")
        ->check(CLI::IsMember({"off", "on", "both"}));
    std::string graphs = "on";
    app.add_option("--graphs", graphs, "decode steps as device graphs: on, off or both (timed one after the other)")
        ->check(CLI::IsMember({"on", "off", "both"}));
    app.add_flag("--profile", profile, "after each batch's timed steps, one more step timed per op (device backends)");
    std::vector<std::string> variant_args;
    app.add_option("--variant", variant_args,
                   "kernel variant set 'name=value[,name=value]' (kernel knobs: deepinfer/kernel_config.h); repeated, each prefill is timed "
                   "per set and the sets' decode steps alternately in two rounds");
    CLI11_PARSE(app, argc, argv);

    std::vector<bool> graph_modes;
    if (graphs != "off") graph_modes.push_back(true);
    if (graphs != "on") graph_modes.push_back(false);
    auto backend = kernels::make_backend(device, threads);
    std::vector<VariantSet> variant_sets;
    try {
        variant_sets = parse_variant_sets(variant_args, *backend);
    } catch (const Error& e) {
        std::fprintf(stderr, "bench_forward: %s\n", e.what());
        return 2;
    }
    std::vector<bool> det_modes;
    if (deterministic != "on") det_modes.push_back(false);
    if (deterministic != "off") det_modes.push_back(true);
    if (deterministic != "off" && !backend->execution().set_batch_invariant(true)) {
        std::fprintf(stderr, "bench_forward: the %s backend has no batch-invariant mode\n", backend->name());
        return 2;
    }
    backend->execution().set_batch_invariant(false);  // the floors are measured on the default kernels; rows set their mode
    auto mode_label = [&](bool det) { return det_modes.size() > 1 || det ? (det ? " det" : " default") : ""; };
    model::Checkpoint ckpt(dir);
    if (std::string type = model::read_config_json(dir).value("model_type", ""); type != "deepseek_v4") {
        std::fprintf(stderr, "bench_forward: measures DeepSeek-V4 checkpoints (model_type deepseek_v4); %s is '%s': "
                     "`deepinfer bench --model %s` measures any model end to end\n", dir.c_str(), type.c_str(), dir.c_str());
        return 2;
    }
    model::DeepseekV4Config cfg = model::load_deepseek_v4_config(dir);
    model::WeightQuant weight_quant = model::WeightQuant::kNone;
    model::Precision matmul_precision = model::Precision::kAuto;
    try {
        weight_quant = model::parse_weight_quant(quantize);
        matmul_precision = model::parse_precision(precision);
        model::check_weight_quant(weight_quant, *backend);
    } catch (const Error& e) {
        std::fprintf(stderr, "bench_forward: %s\n", e.what());
        return 2;
    }
    model::DeepseekV4Model m(cfg, ckpt, *backend, {weight_quant, matmul_precision});
    ThreadPool pool(threads);
    bool host = backend->device() == Device::kCpu;
    double bw = host ? read_bandwidth(pool, size_t{1} << 30) : device_bandwidth(*backend);
    double gemm_rate = host ? gemm_flops(pool) : device_gemm_flops(*backend);
    WeightBytes wb = weight_bytes(ckpt, cfg, weight_quant, model::kept_formats(weight_quant, *backend));
    std::mt19937 rng(7);
    std::printf("model %s on %s: %d layers, hidden %ld, %d experts (top-%d); %d threads; floor bandwidth %.1f GB/s, "
                "GEMM %.0f GFLOP/s\n",
                dir.c_str(), backend->name(), cfg.num_hidden_layers, static_cast<long>(cfg.hidden_size), cfg.n_routed_experts,
                cfg.num_experts_per_tok, pool.num_threads(), bw / 1e9, gemm_rate / 1e9);

    int max_verify = *std::max_element(verify.begin(), verify.end());
    int max_len = std::max(*std::max_element(prompts.begin(), prompts.end()), context + decode_steps * max_verify + 8);
    int max_batch = *std::max_element(batches.begin(), batches.end());
    // The best of two prefills (three with --profile: the second is profiled, not counted).
    auto time_prefill = [&](int p, bool with_profile) {
        double best = 1e30;
        for (int rep = 0; rep < (with_profile ? 3 : 2); ++rep) {
            Session s{m, model::HybridCache(m.cache_layout(), *backend, m.plan_cache_for_tokens(1, max_len)), {}, {0}};
            s.states.push_back(s.cache.add_sequence());
            bool profiled = with_profile && rep == 1;
            backend->execution().set_profiling(profiled);
            auto t0 = Clock::now();
            step(s, {random_tokens(rng, p, cfg.vocab_size)});
            if (!profiled) best = std::min(best, seconds_since(t0));
            backend->execution().set_profiling(false);
        }
        return best;
    };
    // The first prefill of each length also grows the device allocator and picks GEMM kernels for
    // its shapes: untimed.
    for (int p : prompts) time_prefill(p, false);
    // A prefill's floor: its FLOPs (products, and attention over the window plus a quarter of the
    // mean context) at the measured GEMM rate.
    for (int p : prompts)
        for (const VariantSet& set : variant_sets)
            for (bool det : det_modes) {
                backend->execution().set_batch_invariant(det);
                apply(set, *backend);
                double best = time_prefill(p, profile);
                DecodeFloor f = decode_floor(cfg, wb, p, p / 2, bw, gemm_rate);
                std::printf("| prefill | %d tokens%s%s | %.1f tok/s | %.3f s | floor %.3f s (%.2f TFLOP) | %.2fx floor |\n", p,
                            set.label.c_str(), mode_label(det), p / best, best, f.flops / gemm_rate, f.flops / 1e12,
                            best * gemm_rate / f.flops);
                if (profile) std::printf("profile of one %d-token prefill:\n%s", p, backend->execution().profile_report().c_str());
            }
    // Every timed run of decode steps starts from the same prefilled context, so graph modes and
    // variant sets decode at equal lengths.
    auto prefilled = [&](const std::vector<std::vector<int32_t>>& prompt) {
        auto s = std::make_unique<Session>(
            Session{m, model::HybridCache(m.cache_layout(), *backend, m.plan_cache_for_tokens(max_batch, max_len)), {}, {}});
        for (size_t i = 0; i < prompt.size(); ++i) {
            s->states.push_back(s->cache.add_sequence());
            s->lengths.push_back(0);
        }
        step(*s, prompt);
        return s;
    };
    // Rows of `b` sequences decoding `v` tokens each per step, in every graph / variant / mode.
    auto decode_rows = [&](int b, int v, const std::vector<std::vector<int32_t>>& prompt) {
        // A verification step computes b * v tokens: its floor is that batch's, roughly.
        DecodeFloor f = decode_floor(cfg, wb, b * v, context, bw, gemm_rate);
        std::string verify_label = verify.size() > 1 || v > 1 ? " verify " + std::to_string(v) : "";
        for (bool graphs : graph_modes) {
            backend->execution().set_graphs(graphs);
            int rounds = variant_sets.size() > 1 ? 2 : 1;
            for (int round = 0; round < rounds; ++round)
                for (const VariantSet& set : variant_sets)
                    for (bool det : det_modes) {
                        backend->execution().set_batch_invariant(det);
                        apply(set, *backend);
                        auto s = prefilled(prompt);
                        double t = median_decode_step(*s, b, decode_steps, cfg.vocab_size, rng, v);
                        std::printf("| decode | batch %d%s%s%s%s | %.2f tok/s | step %.2f ms | floor %.2f ms (%.2f GB read: "
                                    "%.2f ms; %.1f GFLOP: %.2f ms) | %.2fx floor |\n",
                                    b, verify_label.c_str(), graph_modes.size() > 1 ? (graphs ? " graphs" : " eager") : "",
                                    set.label.c_str(), mode_label(det), b * v / t, t * 1e3, f.seconds() * 1e3, f.bytes / 1e9,
                                    f.bytes / bw * 1e3, f.flops / 1e9, f.flops / gemm_rate * 1e3, t / f.seconds());
                    }
        }
    };
    for (int b : batches) {
        std::vector<std::vector<int32_t>> prompt;
        for (int i = 0; i < b; ++i) prompt.push_back(random_tokens(rng, context, cfg.vocab_size));
        for (int v : verify) decode_rows(b, v, prompt);
        apply(variant_sets.front(), *backend);
        if (profile) print_step_profile(*prefilled(prompt), b, cfg.vocab_size, rng);
    }
    return 0;
}

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {  // a full cache, a bad checkpoint: a message, not an abort
        std::fprintf(stderr, "bench_forward: %s\n", e.what());
        return 1;
    }
}
