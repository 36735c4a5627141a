#include "model/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deepinfer::model {
namespace fs = std::filesystem;

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
    DI_CHECK(fs::is_directory(dir), "model directory {} does not exist", dir);
    fs::path index = fs::path(dir) / "model.safetensors.index.json";
    std::map<std::string, std::string> listed;  // tensor -> shard file named by the index
    std::vector<std::string> shard_names;
    if (fs::exists(index)) {
        std::ifstream in(index);
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(in);
        } catch (const nlohmann::json::exception& e) {
            fail("{} is not valid JSON ({})", index.string(), e.what());
        }
        DI_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), "{} has no weight_map", index.string());
        std::set<std::string> unique;
        for (const auto& [name, file] : j["weight_map"].items()) {
            listed[name] = file.get<std::string>();
            unique.insert(file.get<std::string>());
        }
        shard_names.assign(unique.begin(), unique.end());
    } else {
        for (const auto& e : fs::directory_iterator(dir))
            if (e.path().extension() == ".safetensors") shard_names.push_back(e.path().filename().string());
        std::sort(shard_names.begin(), shard_names.end());
    }
    DI_CHECK(!shard_names.empty(), "no *.safetensors files in {}", dir);
    std::map<std::string, const SafetensorsFile*> by_file;
    for (const auto& name : shard_names) {
        files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / name).string()));
        by_file[name] = files_.back().get();
        for (const auto& [tensor, entry] : files_.back()->entries()) where_[tensor] = files_.back().get();
    }
    for (const auto& [tensor, file] : listed) {
        auto it = where_.find(tensor);
        DI_CHECK(it != where_.end() && it->second == by_file[file], "{} lists tensor '{}' in {}, which does not contain it",
                 index.string(), tensor, file);
    }
}

std::optional<std::string> Checkpoint::find(const std::vector<std::string>& names) const {
    for (const auto& n : names)
        if (has(n)) return n;
    return std::nullopt;
}

Tensor Checkpoint::tensor(const std::string& name) const {
    auto it = where_.find(name);
    DI_CHECK(it != where_.end(), "tensor '{}' is not in {}", name, dir_);
    return it->second->tensor(name);
}

const SafetensorsEntry& Checkpoint::entry(const std::string& name) const { return where_.at(name)->entries().at(name); }

const std::string& Checkpoint::file_of(const std::string& name) const { return where_.at(name)->path(); }

std::vector<std::string> Checkpoint::names() const {
    std::vector<std::string> out;
    for (const auto& [n, f] : where_) out.push_back(n);
    return out;
}

}  // namespace deepinfer::model
