#include "core/safetensors.h"

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"

namespace deepinfer {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

uint64_t read_le64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& j,
                             size_t data_size) {
    DI_CHECK(j.is_object() && j.contains("dtype") && j.contains("shape") && j.contains("data_offsets"),
             "{}: header entry for tensor '{}' lacks dtype/shape/data_offsets", path, name);
    SafetensorsEntry e;
    const auto& offsets = j["data_offsets"];
    DI_CHECK(j["dtype"].is_string() && j["shape"].is_array() && offsets.is_array() && offsets.size() == 2 &&
                 offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
             "{}: malformed header entry for tensor '{}'", path, name);
    e.dtype_name = j["dtype"].get<std::string>();
    e.dtype = parse_dtype(e.dtype_name);
    uint64_t count = 1;
    for (const auto& d : j["shape"]) {
        DI_CHECK(d.is_number_unsigned(), "{}: tensor '{}' has a non-integer or negative dimension", path, name);
        e.shape.push_back(d.get<int64_t>());
        count *= d.get<uint64_t>();
    }
    uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    DI_CHECK(begin <= end, "{}: tensor '{}' has data_offsets [{}, {}] out of order", path, name, begin, end);
    DI_CHECK(end <= data_size, "{} is truncated: tensor '{}' needs {} data bytes but the file holds {}", path, name,
             end, data_size);
    if (e.dtype != DType::kUnknown) {
        DI_CHECK(count * dtype_size(e.dtype) == end - begin,
                 "{}: tensor '{}' ({} {} elements) does not match its {} data bytes", path, name, e.dtype_name, count,
                 end - begin);
    }
    e.offset = begin;
    e.nbytes = end - begin;
    return e;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(std::make_shared<MappedFile>(path)) {
    const uint8_t* base = file_->data();
    size_t size = file_->size();
    DI_CHECK(size >= 8, "{} is not a safetensors file (only {} bytes)", path, size);
    uint64_t header_len = read_le64(base);
    DI_CHECK(header_len <= kMaxHeaderBytes && header_len <= size - 8,
             "{} is truncated or not a safetensors file (header claims {} bytes, file has {})", path, header_len, size);
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(base + 8, base + 8 + header_len);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: safetensors header is not valid JSON ({})", path, e.what());
    }
    DI_CHECK(header.is_object(), "{}: safetensors header is not a JSON object", path);
    data_start_ = 8 + header_len;
    for (const auto& [name, value] : header.items()) {
        if (name == "__metadata__") {
            if (!value.is_object()) continue;
            for (const auto& [k, v] : value.items())
                if (v.is_string()) metadata_[k] = v.get<std::string>();
            continue;
        }
        entries_[name] = parse_entry(path, name, value, size - data_start_);
    }
}

const std::string& SafetensorsFile::path() const { return file_->path(); }

Tensor SafetensorsFile::tensor(const std::string& name) const {
    auto it = entries_.find(name);
    DI_CHECK(it != entries_.end(), "{}: no tensor named '{}'", path(), name);
    const SafetensorsEntry& e = it->second;
    DI_CHECK(e.dtype != DType::kUnknown, "{}: tensor '{}' has unsupported dtype {}", path(), name, e.dtype_name);
    void* p = const_cast<uint8_t*>(file_->data() + data_start_ + e.offset);
    return Tensor::wrap(p, e.dtype, e.shape, file_);
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    size_t offset = 0;
    for (const auto& [name, t] : tensors) {
        DI_CHECK(t.device() == Device::kCpu, "write_safetensors: tensor '{}' is not in host memory", name);
        header[name] = {{"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + t.nbytes()}}};
        offset += t.nbytes();
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    DI_CHECK(out.good(), "cannot open {} for writing", path);
    uint64_t len = text.size();
    uint8_t len_bytes[8];
    for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(len >> (8 * i));
    out.write(reinterpret_cast<const char*>(len_bytes), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& [name, t] : tensors) out.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
    DI_CHECK(out.good(), "failed writing {}", path);
}

}  // namespace deepinfer
