#include "core/safetensors.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "base/error.h"
#include "tests/test_util.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) { return (fs::temp_directory_path() / ("di_st_" + name)).string(); }

void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
    std::ofstream out(path, std::ios::binary);
    uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header;
    out << std::string(data_bytes, '\0');
}

std::string error_of(const std::string& path) {
    try {
        SafetensorsFile f(path);
        for (const auto& [name, e] : f.entries()) f.tensor(name);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(Safetensors, WriteThenReadRoundTrips) {
    std::mt19937 rng(5);
    Tensor a = test::random_f32({3, 5}, rng), b = test::random_bf16({7}, rng);
    Tensor c = Tensor::empty(DType::kI64, {2, 2});
    for (int i = 0; i < 4; ++i) c.data<int64_t>()[i] = i * 1000000007LL;
    std::string path = temp_path("roundtrip.safetensors");
    write_safetensors(path, {{"a", a}, {"b", b}, {"c", c}}, {{"format", "pt"}});
    SafetensorsFile f(path);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    EXPECT_EQ(f.tensor("a").shape(), (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(std::memcmp(f.tensor("a").raw(), a.raw(), a.nbytes()), 0);
    EXPECT_EQ(std::memcmp(f.tensor("b").raw(), b.raw(), b.nbytes()), 0);
    EXPECT_EQ(f.tensor("c").data<int64_t>()[3], 3 * 1000000007LL);
}

TEST(Safetensors, MalformedFilesGiveClearErrors) {
    std::string p = temp_path("bad.safetensors");
    write_raw(p, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
    EXPECT_NE(error_of(p).find("truncated"), std::string::npos) << error_of(p);
    write_raw(p, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})", 16);
    EXPECT_NE(error_of(p).find("does not match"), std::string::npos) << error_of(p);
    write_raw(p, R"({"w":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}})", 2);
    EXPECT_NE(error_of(p).find("unsupported dtype F4"), std::string::npos) << error_of(p);
    write_raw(p, R"({"w":{"dtype":"F32","shape":[4]}})", 16);
    EXPECT_NE(error_of(p).find("lacks"), std::string::npos) << error_of(p);
    write_raw(p, "{not json", 0);
    EXPECT_NE(error_of(p).find("not valid JSON"), std::string::npos) << error_of(p);
    { std::ofstream(p, std::ios::binary) << "abc"; }
    EXPECT_NE(error_of(p).find("not a safetensors file"), std::string::npos) << error_of(p);
    std::ofstream(p, std::ios::binary) << std::string("\xff\xff\xff\xff\xff\x00\x00\x00", 8) << "{}";
    EXPECT_NE(error_of(p).find("truncated"), std::string::npos) << error_of(p);
    EXPECT_NE(error_of(temp_path("does_not_exist")).find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer
