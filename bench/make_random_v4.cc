// Writes a DeepSeek-V4-shaped checkpoint with random weights (HF-saved layout, bf16 weights,
// fp32 norms / mHC / sinks / biases) for benchmarks. Presets size it; values are uniform with
// fan-in scaling so activations stay O(1) and routing stays balanced.
#include <CLI/CLI.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/safetensors.h"

namespace {

using deepinfer::DType;
using deepinfer::Tensor;

struct Shape {
    int64_t vocab = 129280, hidden = 1024, layers = 8, heads = 16, head_dim = 512, rope = 64, q_lora = 384;
    int64_t o_groups = 4, o_lora = 256, experts = 48, top_k = 6, inter = 512, index_heads = 64, index_dim = 128;
    int64_t index_topk = 512, window = 128, hash_layers = 2;
};

Shape preset(const std::string& name) {
    Shape s;
    if (name == "cpu-1b") return s;  // ~0.97B parameters
    if (name == "gpu-5b") {           // >= 5B parameters for the GPU benchmark
        s.hidden = 2048, s.layers = 12, s.heads = 32, s.q_lora = 768, s.o_groups = 8, s.o_lora = 512, s.experts = 64;
        s.inter = 1024;
        return s;
    }
    if (name == "flash-dims") {  // V4-Flash's per-layer dimensions (8 of its 43 layers, 32 of its 256 experts)
        s.hidden = 4096, s.layers = 8, s.heads = 64, s.q_lora = 1024, s.o_groups = 8, s.o_lora = 1024, s.experts = 32;
        s.inter = 2048, s.hash_layers = 3;
        return s;
    }
    if (name == "tiny") {
        s.vocab = 4096, s.hidden = 128, s.layers = 4, s.heads = 4, s.head_dim = 64, s.rope = 16, s.q_lora = 64;
        s.o_groups = 2, s.o_lora = 32, s.experts = 8, s.top_k = 2, s.inter = 64, s.index_heads = 4, s.index_dim = 32;
        s.index_topk = 16, s.window = 32;
        return s;
    }
    throw CLI::ValidationError("preset", "unknown preset " + name + " (cpu-1b, gpu-5b, flash-dims, tiny)");
}

class Writer {
public:
    explicit Writer(uint64_t seed) : seed_(seed) {}
    void matrix(const std::string& name, std::vector<int64_t> shape) {
        Tensor t = Tensor::empty(DType::kBF16, shape);
        float a = std::sqrt(3.0f / static_cast<float>(shape.back()));
        fill(t, -a, a);
        tensors_.emplace_back(name, t);
    }
    void param(const std::string& name, std::vector<int64_t> shape, float lo, float hi) {
        Tensor t = Tensor::empty(DType::kF32, shape);
        fill(t, lo, hi);
        tensors_.emplace_back(name, t);
    }
    void table(const std::string& name, int64_t rows, int64_t k, int64_t experts) {
        Tensor t = Tensor::empty(DType::kI64, {rows, k});
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < k; ++j) t.data<int64_t>()[r * k + j] = (r * 7 + j * (experts / k + 1)) % experts;
        tensors_.emplace_back(name, t);
    }
    int64_t num_params() const {
        int64_t n = 0;
        for (const auto& [name, t] : tensors_) n += t.numel();
        return n;
    }
    void write(const std::string& path) { deepinfer::write_safetensors(path, tensors_, {{"format", "pt"}}); }

private:
    // Chunks of the tensor are filled on all cores, each from its own generator seeded by (seed,
    // tensor, chunk): the output depends on the seed only, not on the number of threads.
    void fill(Tensor& t, float lo, float hi) {
        constexpr int64_t kChunk = int64_t{1} << 20;
        int64_t chunks = (t.numel() + kChunk - 1) / kChunk, tensor = static_cast<int64_t>(tensors_.size());
        std::atomic<int64_t> next{0};
        auto work = [&] {
            for (int64_t c; (c = next++) < chunks;) {
                std::mt19937_64 rng(seed_ ^ (static_cast<uint64_t>(tensor) << 32) ^ static_cast<uint64_t>(c) * 0x9E3779B97F4A7C15ull);
                std::uniform_real_distribution<float> u(lo, hi);
                for (int64_t i = c * kChunk; i < std::min(t.numel(), (c + 1) * kChunk); ++i) {
                    float v = u(rng);
                    if (t.dtype() == DType::kBF16)
                        t.data<uint16_t>()[i] = deepinfer::f32_to_bf16(v);
                    else
                        t.data<float>()[i] = v;
                }
            }
        };
        std::vector<std::thread> threads;
        int64_t n = std::min<int64_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
        for (int64_t i = 1; i < n; ++i) threads.emplace_back(work);
        work();
        for (auto& th : threads) th.join();
    }
    uint64_t seed_;
    std::vector<std::pair<std::string, Tensor>> tensors_;
};

std::vector<std::string> layer_types(int64_t n) {
    std::vector<std::string> t = {"sliding_attention"};
    for (int64_t i = 1; i < n; ++i) t.push_back(i % 2 ? "compressed_sparse_attention" : "heavily_compressed_attention");
    return t;
}

void write_layer(Writer& w, const Shape& s, int64_t l, const std::string& type) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    int64_t D = s.hidden, d = s.head_dim, mix = 24, hd = s.heads * d;
    for (const char* site : {"attn", "ffn"}) {
        w.param(p + "hc_" + site + "_fn", {mix, 4 * D}, -0.01f, 0.01f);
        w.param(p + "hc_" + site + "_base", {mix}, -0.5f, 0.5f);
        w.param(p + "hc_" + site + "_scale", {3}, 0.5f, 1.5f);
    }
    w.param(p + "attn_norm.weight", {D}, 0.8f, 1.2f);
    w.param(p + "ffn_norm.weight", {D}, 0.8f, 1.2f);
    w.matrix(p + "attn.wq_a.weight", {s.q_lora, D});
    w.param(p + "attn.q_norm.weight", {s.q_lora}, 0.8f, 1.2f);
    w.matrix(p + "attn.wq_b.weight", {hd, s.q_lora});
    w.matrix(p + "attn.wkv.weight", {d, D});
    w.param(p + "attn.norm.weight", {d}, 0.8f, 1.2f);
    w.matrix(p + "attn.wo_a.weight", {s.o_groups * s.o_lora, hd / s.o_groups});
    w.matrix(p + "attn.wo_b.weight", {D, s.o_groups * s.o_lora});
    w.param(p + "attn.attn_sink", {s.heads}, -1.0f, 1.0f);
    if (type != "sliding_attention") {
        bool csa = type == "compressed_sparse_attention";
        int64_t c = csa ? 2 : 1, rate = csa ? 4 : 128;
        w.matrix(p + "attn.compressor.wkv.weight", {c * d, D});
        w.matrix(p + "attn.compressor.wgate.weight", {c * d, D});
        w.param(p + "attn.compressor.ape", {rate, c * d}, -0.5f, 0.5f);
        w.param(p + "attn.compressor.norm.weight", {d}, 0.8f, 1.2f);
        if (csa) {
            w.matrix(p + "attn.indexer.compressor.wkv.weight", {2 * s.index_dim, D});
            w.matrix(p + "attn.indexer.compressor.wgate.weight", {2 * s.index_dim, D});
            w.param(p + "attn.indexer.compressor.ape", {4, 2 * s.index_dim}, -0.5f, 0.5f);
            w.param(p + "attn.indexer.compressor.norm.weight", {s.index_dim}, 0.8f, 1.2f);
            w.matrix(p + "attn.indexer.wq_b.weight", {s.index_heads * s.index_dim, s.q_lora});
            w.matrix(p + "attn.indexer.weights_proj.weight", {s.index_heads, D});
        }
    }
    w.matrix(p + "ffn.gate.weight", {s.experts, D});
    if (l < s.hash_layers)
        w.table(p + "ffn.gate.tid2eid", s.vocab, s.top_k, s.experts);
    else
        w.param(p + "ffn.gate.bias", {s.experts}, -0.1f, 0.1f);
    for (int64_t e = 0; e < s.experts; ++e) {
        std::string q = p + "ffn.experts." + std::to_string(e) + ".";
        w.matrix(q + "w1.weight", {s.inter, D});
        w.matrix(q + "w3.weight", {s.inter, D});
        w.matrix(q + "w2.weight", {D, s.inter});
    }
    w.matrix(p + "ffn.shared_experts.w1.weight", {s.inter, D});
    w.matrix(p + "ffn.shared_experts.w3.weight", {s.inter, D});
    w.matrix(p + "ffn.shared_experts.w2.weight", {D, s.inter});
}

nlohmann::json config_of(const Shape& s) {
    return {{"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"}, {"vocab_size", s.vocab},
            {"hidden_size", s.hidden}, {"num_hidden_layers", s.layers}, {"num_attention_heads", s.heads},
            {"num_key_value_heads", 1}, {"head_dim", s.head_dim}, {"qk_rope_head_dim", s.rope}, {"q_lora_rank", s.q_lora},
            {"o_groups", s.o_groups}, {"o_lora_rank", s.o_lora}, {"n_routed_experts", s.experts},
            {"num_experts_per_tok", s.top_k}, {"moe_intermediate_size", s.inter}, {"num_hash_layers", s.hash_layers},
            {"layer_types", layer_types(s.layers)}, {"index_n_heads", s.index_heads}, {"index_head_dim", s.index_dim},
            {"index_topk", s.index_topk}, {"sliding_window", s.window}, {"rope_theta", 10000.0},
            {"compress_rope_theta", 160000.0},
            {"rope_scaling", {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 65536},
                              {"beta_fast", 32}, {"beta_slow", 1}}},
            {"max_position_embeddings", 1048576}, {"bos_token_id", 0}, {"eos_token_id", 1}};
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Write a random-weight DeepSeek-V4-shaped checkpoint"};
    std::string out, name = "cpu-1b";
    uint64_t seed = 1;
    app.add_option("--out", out, "output directory")->required();
    app.add_option("--preset", name, "cpu-1b (~1B params), gpu-5b (>=5B), flash-dims (V4-Flash layer sizes, 8.7B), tiny");
    app.add_option("--seed", seed);
    CLI11_PARSE(app, argc, argv);
    Shape s = preset(name);
    std::filesystem::create_directories(out);
    Writer w(seed);
    w.matrix("model.embed_tokens.weight", {s.vocab, s.hidden});
    w.matrix("head.weight", {s.vocab, s.hidden});
    w.param("model.norm.weight", {s.hidden}, 0.8f, 1.2f);
    w.param("model.hc_head.hc_fn", {4, 4 * s.hidden}, -0.01f, 0.01f);
    w.param("model.hc_head.hc_base", {4}, -0.5f, 0.5f);
    w.param("model.hc_head.hc_scale", {1}, 0.5f, 1.5f);
    auto types = layer_types(s.layers);
    for (int64_t l = 0; l < s.layers; ++l) write_layer(w, s, l, types[l]);
    w.write(out + "/model.safetensors");
    std::ofstream(out + "/config.json") << config_of(s).dump(1);
    std::printf("wrote %s: %.3fB parameters\n", out.c_str(), w.num_params() / 1e9);
    return 0;
}
