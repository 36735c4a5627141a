#pragma once
// Reading a checkpoint's config.json, and picking the architecture from its model_type.
#include <string>

#include <nlohmann/json.hpp>

namespace deepinfer::model {

// `dir`/config.json parsed; throws deepinfer::Error when missing or not JSON.
nlohmann::json read_config_json(const std::string& dir);

}  // namespace deepinfer::model
