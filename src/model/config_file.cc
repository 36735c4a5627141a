#include "model/config_file.h"

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "model/archs/deepseek_v4.h"
#include "model/archs/deepseek_v41.h"

namespace deepinfer::model {

nlohmann::json read_config_json(const std::string& dir) {
    std::filesystem::path path = std::filesystem::path(dir) / "config.json";
    std::ifstream in(path);
    DI_CHECK(in.good(), "cannot read {}", path.string());
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        fail("{} is not valid JSON ({})", path.string(), e.what());
    }
}

std::unique_ptr<CausalLm> load_causal_lm(const std::string& dir, kernels::Backend& backend, LoadOptions options) {
    nlohmann::json j = read_config_json(dir);
    std::string type = j.is_object() && j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
    if (type == "deepseek_v41" || type == "deepseek_v41_text")
        return std::make_unique<DeepseekV41Model>(parse_deepseek_v41_config(j), Checkpoint(dir), backend, options);
    return std::make_unique<DeepseekV4Model>(parse_deepseek_v4_config(j), Checkpoint(dir), backend, options);
}

}  // namespace deepinfer::model
