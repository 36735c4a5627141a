// `deepinfer logits`: fp32 logits of every position of an input sequence, for parity checks.
#include <vector>

#include <fmt/ranges.h>

#include "apps/commands.h"
#include "base/error.h"
#include "core/safetensors.h"
#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "runtime/sequence_logits.h"

namespace deepinfer::apps {

void add_model_run_options(CLI::App* cmd, ModelRunOptions& o) {
    cmd->add_option("--threads", o.threads, "CPU threads (default: all)")->check(CLI::NonNegativeNumber);
    cmd->add_option("--device", o.device, "cpu, cuda or cuda:N");
    cmd->add_option("--quantize", o.quantize, "re-encode weights at load: none, or q8 (8-bit blocks; CPU)")
        ->check(CLI::IsMember({"none", "q8"}));
    cmd->add_option("--precision", o.precision, "matrix products: exact, fast (bf16 activations) or auto")
        ->check(CLI::IsMember({"auto", "exact", "fast"}));
}

std::unique_ptr<model::CausalLm> load_model(const std::string& dir, kernels::Backend& backend, const ModelRunOptions& o) {
    return model::load_causal_lm(dir, backend, {model::parse_weight_quant(o.quantize), model::parse_precision(o.precision)});
}

void add_logits_command(CLI::App& app, LogitsOptions& o) {
    auto* cmd = app.add_subcommand("logits", "Write the logits of every input position (safetensors in and out)");
    cmd->add_option("--model", o.model_dir, "HF model directory")->required()->check(CLI::ExistingDirectory);
    cmd->add_option("--input", o.input_path, "safetensors file with int64 input_ids [L]")->required()->check(CLI::ExistingFile);
    cmd->add_option("--output", o.output_path, "safetensors file to write float32 logits [L, vocab] to")->required();
    auto* chunk = cmd->add_option("--chunk", o.chunk, "prefill in chunks of N tokens")->check(CLI::PositiveNumber);
    cmd->add_option("--decode-from", o.decode_from, "prefill P tokens, then decode the rest one at a time")
        ->check(CLI::NonNegativeNumber)
        ->excludes(chunk);
    add_model_run_options(cmd, o.run);
}

InputIds read_input_id_tensor(const std::string& path) {
    SafetensorsFile file(path);
    DI_CHECK(file.contains("input_ids"), "{} has no tensor named input_ids", path);
    Tensor t = file.tensor("input_ids");
    DI_CHECK(t.dtype() == DType::kI64 || t.dtype() == DType::kI32, "{}: input_ids must be int64 (or int32), got {}", path,
             dtype_name(t.dtype()));
    InputIds out{std::vector<int32_t>(t.numel()), t.shape()};
    for (int64_t i = 0; i < t.numel(); ++i) {
        int64_t v = t.dtype() == DType::kI64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
        DI_CHECK(v >= 0 && v <= INT32_MAX, "{}: input_ids[{}] = {} is not a token id", path, i, v);
        out.ids[i] = static_cast<int32_t>(v);
    }
    return out;
}

std::vector<int32_t> read_input_ids(const std::string& path) {
    InputIds t = read_input_id_tensor(path);
    DI_CHECK(t.shape.size() == 1 || (t.shape.size() == 2 && t.shape[0] == 1), "{}: input_ids must have shape [L], got [{}]",
             path, fmt::join(t.shape, ", "));
    return std::move(t.ids);
}

int run_logits(const LogitsOptions& o) {
    std::vector<int32_t> ids = read_input_ids(o.input_path);
    auto backend = kernels::make_backend(o.run.device, o.run.threads);
    std::unique_ptr<model::CausalLm> model = load_model(o.model_dir, *backend, o.run);
    runtime::LogitsSchedule schedule{o.chunk, o.decode_from};
    Tensor logits = runtime::sequence_logits(*model, ids, schedule);
    write_safetensors(o.output_path, {{"logits", logits}});
    return 0;
}

}  // namespace deepinfer::apps
