#pragma once
// Safetensors files: a memory-mapped reader that validates the header against the file, and a
// writer. Tensors read from a file are zero-copy views that keep the mapping alive.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace deepinfer {

class MappedFile;

struct SafetensorsEntry {
    DType dtype = DType::kUnknown;
    std::string dtype_name;  // as written in the file (kept for error messages about unknown dtypes)
    std::vector<int64_t> shape;
    size_t offset = 0;  // from the start of the data section
    size_t nbytes = 0;
};

class SafetensorsFile {
public:
    // Maps and validates `path`. Throws deepinfer::Error naming the file on a malformed or truncated
    // header, on offsets outside the file, and on sizes that do not match dtype and shape.
    explicit SafetensorsFile(const std::string& path);

    const std::string& path() const;
    const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    bool contains(const std::string& name) const { return entries_.count(name) != 0; }

    // Zero-copy view of tensor `name`. Throws for a missing name or an unsupported dtype.
    Tensor tensor(const std::string& name) const;

private:
    std::shared_ptr<MappedFile> file_;
    size_t data_start_ = 0;
    std::map<std::string, SafetensorsEntry> entries_;
    std::map<std::string, std::string> metadata_;
};

// Writes host tensors to `path` (in the given order), with optional string metadata.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace deepinfer
