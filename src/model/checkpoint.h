#pragma once
// An HF model directory's tensors: model.safetensors.index.json and its shards, or every
// *.safetensors file in the directory. Tensors are zero-copy views of the memory-mapped files.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/safetensors.h"

namespace deepinfer::model {

class Checkpoint {
public:
    // Opens and validates every shard; throws deepinfer::Error naming the directory or file.
    explicit Checkpoint(const std::string& dir);

    const std::string& dir() const { return dir_; }
    bool has(const std::string& name) const { return where_.count(name) != 0; }
    // The first of `names` present in the checkpoint.
    std::optional<std::string> find(const std::vector<std::string>& names) const;
    // Zero-copy view; throws naming the file for a missing tensor or an unsupported dtype.
    Tensor tensor(const std::string& name) const;
    const SafetensorsEntry& entry(const std::string& name) const;
    const std::string& file_of(const std::string& name) const;
    std::vector<std::string> names() const;

private:
    std::string dir_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, const SafetensorsFile*> where_;
};

}  // namespace deepinfer::model
