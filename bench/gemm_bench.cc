// GEMM kernel throughput on this CPU: decode-shaped products (few rows of x against a large bf16
// or Q8 weight, bf16 also with activations rounded to bf16 as the fast precision computes it, memory-bound: reported as GB/s of weight read next to the machine's read
// bandwidth) and prefill-shaped products (compute-bound: GFLOP/s), for every instruction set the
// CPU has.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

#include "base/thread_pool.h"
#include "core/quant_fp8.h"
#include "core/quant_mxfp4.h"
#include "core/quant_q8.h"
#include "core/tensor.h"
#include "kernels/cpu/gemm.h"

namespace {

using namespace deepinfer;
using Clock = std::chrono::steady_clock;

template <typename F>
double best_seconds(int reps, F&& f) {
    double best = 1e30;
    for (int i = 0; i < reps; ++i) {
        auto t0 = Clock::now();
        f();
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return best;
}

double read_bandwidth(ThreadPool& pool, const Tensor& buf) {
    const float* p = static_cast<const float*>(buf.raw());
    int64_t n = static_cast<int64_t>(buf.nbytes() / 4);
    std::vector<float> sink(pool.num_threads() * 16);
    double t = best_seconds(5, [&] {
        pool.parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
            float acc[16] = {};
            for (int64_t i = b; i + 16 <= e; i += 16)
                for (int j = 0; j < 16; ++j) acc[j] += p[i + j];
            std::copy(acc, acc + 16, sink.begin() + (b * pool.num_threads() / n) * 16);
        });
    });
    return buf.nbytes() / t;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"CPU GEMM benchmark"};
    int threads = 0;
    int64_t n = 65536, k = 2048;
    app.add_option("--threads", threads);
    app.add_option("--n", n, "weight rows (decode shape)");
    app.add_option("--k", k, "weight columns");
    CLI11_PARSE(app, argc, argv);
    ThreadPool pool(threads);
    std::mt19937 rng(1);
    Tensor w = Tensor::empty(DType::kBF16, {n, k});
    for (int64_t i = 0; i < w.numel(); ++i) w.data<uint16_t>()[i] = f32_to_bf16(static_cast<float>(rng() % 1000) / 1000.0f);
    double bw = read_bandwidth(pool, w);
    std::printf("weight %ld x %ld bf16 (%.0f MB), %d threads, read bandwidth over it %.1f GB/s\n", static_cast<long>(n),
                static_cast<long>(k), w.nbytes() / 1e6, pool.num_threads(), bw / 1e9);
    Tensor wq = q8::quantize(w);
    Tensor codes = Tensor::empty(DType::kU8, {n, k / 2}), scales = Tensor::empty(DType::kF32, {n, k / 32});
    for (int64_t i = 0; i < codes.numel(); ++i) codes.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
    for (int64_t i = 0; i < scales.numel(); ++i) scales.data<float>()[i] = 1.0f / 64;
    Tensor w4 = mxfp4::pack(codes, scales, k);
    Tensor codes8 = Tensor::empty(DType::kF8E4M3, {n, k}), scales8 = Tensor::empty(DType::kF32, {(n + 127) / 128, (k + 127) / 128});
    for (int64_t i = 0; i < codes8.numel(); ++i) codes8.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 0x7F);
    for (int64_t i = 0; i < scales8.numel(); ++i) scales8.data<float>()[i] = 1.0f / 64;
    Tensor w8 = fp8::pack(codes8, scales8, {128, 128});
    std::vector<uint8_t> scratch;
    // bf16, MXFP4 and FP8 weights with fp32 activations (exact) and activations rounded to bf16
    // (fast); MXFP4 also with 8-bit ones (--quantize q8).
    struct Case {
        const Tensor* weight;
        bool fast, q8;
        const char* label;
    };
    for (const Case& c : {Case{&w, false, false, "bf16"}, Case{&w, true, false, "bf16, fast"}, Case{&wq, false, true, "q8"},
                          Case{&w4, false, false, "mxfp4"}, Case{&w4, true, false, "mxfp4, fast"},
                          Case{&w4, false, true, "mxfp4, q8 activations"}, Case{&w8, false, false, "fp8"},
                          Case{&w8, true, false, "fp8, fast"}}) {
        for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
            if (isa > detect_isa() || (c.weight != &w && isa == Isa::kAvx2)) continue;  // Q8 / MXFP4: AVX-512 or scalar
            if (c.fast && isa == Isa::kScalar) continue;
            for (int64_t m : {1, 4, 16, 128, 512}) {
                Tensor x = Tensor::empty(DType::kF32, {m, k}), y = Tensor::empty(DType::kF32, {m, n});
                for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.001f * static_cast<float>(i % 997);
                kernels::cpu::GemmArgs a{.x = x.data<float>(), .lda = k, .w = c.weight->raw(), .ldw = k,
                                         .w_dtype = c.weight->dtype(), .y = y.data<float>(), .ldy = n, .m = m, .n = n,
                                         .k = k, .bf16_activations = c.fast, .q8_activations = c.q8};
                if ((isa == Isa::kScalar && m > 4) || (m > 128 && n * k > (int64_t{1} << 25))) continue;
                double t = best_seconds(m >= 128 ? 2 : 5, [&] { kernels::cpu::gemm(pool, isa, a, &scratch); });
                double bytes = static_cast<double>(c.weight->nbytes());
                std::printf("| %s | %s | m=%ld | %.2f ms | weight read %.1f GB/s (%.0f%% of bandwidth) | %.1f GFLOP/s |\n",
                            c.label, isa_name(isa), static_cast<long>(m), t * 1e3, bytes / t / 1e9, 100.0 * bytes / t / bw,
                            2.0 * m * n * k / t / 1e9);
            }
        }
    }
    return 0;
}
