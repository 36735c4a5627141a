#pragma once
// A read-only memory mapping of a whole file. Owns the mapping; movable, not copyable.
#include <cstddef>
#include <cstdint>
#include <string>

namespace deepinfer {

class MappedFile {
public:
    // Maps `path`; throws deepinfer::Error naming the file when it cannot be opened or mapped.
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

private:
    void release();

    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace deepinfer
