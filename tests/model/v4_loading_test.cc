// Broken checkpoints give one clear error naming the tensor or file, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "core/safetensors.h"
#include "kernels/backend.h"
#include "model/archs/deepseek_v4.h"
#include "tests/test_util.h"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;

class BrokenCheckpoint : public ::testing::Test {
protected:
    void SetUp() override {
        src_ = test::data_path("v4/v4_tiny_a");
        dir_ = fs::temp_directory_path() / ("di_broken_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        fs::copy_file(fs::path(src_) / "config.json", dir_ / "config.json");
    }
    void TearDown() override { fs::remove_all(dir_); }

    // Rewrites model.safetensors with `edit` applied to the (name, tensor) list.
    template <typename F>
    void write_model(F&& edit) {
        SafetensorsFile in(src_ + "/model.safetensors");
        std::vector<std::pair<std::string, Tensor>> tensors;
        for (const auto& [name, e] : in.entries()) tensors.emplace_back(name, in.tensor(name));
        edit(tensors);
        write_safetensors((dir_ / "model.safetensors").string(), tensors);
    }

    std::string load_error() {
        auto backend = kernels::make_cpu_backend(1);
        try {
            DeepseekV4Model m(dir_.string(), *backend);
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    }

    std::string src_;
    fs::path dir_;
};

TEST_F(BrokenCheckpoint, MissingTensorIsNamed) {
    write_model([](auto& t) { std::erase_if(t, [](auto& p) { return p.first == "model.layers.2.attn.wq_b.weight"; }); });
    std::string err = load_error();
    EXPECT_NE(err.find("missing tensor"), std::string::npos) << err;
    EXPECT_NE(err.find("layers.2.attn.wq_b.weight"), std::string::npos) << err;
}

TEST_F(BrokenCheckpoint, WrongShapeIsNamed) {
    write_model([](auto& t) {
        for (auto& [name, tensor] : t)
            if (name == "model.layers.1.attn.wq_a.weight") tensor = tensor.reshape({tensor.dim(1), tensor.dim(0)});
    });
    std::string err = load_error();
    EXPECT_NE(err.find("model.layers.1.attn.wq_a.weight"), std::string::npos) << err;
    EXPECT_NE(err.find("expected [48, 64]"), std::string::npos) << err;
}

TEST_F(BrokenCheckpoint, UnsupportedDtypeIsNamed) {
    write_model([](auto& t) {
        for (auto& [name, tensor] : t)
            if (name == "model.layers.0.attn.wkv.weight") tensor = Tensor::zeros(DType::kI16, tensor.shape());
    });
    std::string err = load_error();
    EXPECT_NE(err.find("model.layers.0.attn.wkv.weight"), std::string::npos) << err;
    EXPECT_NE(err.find("dtype I16"), std::string::npos) << err;
}

TEST_F(BrokenCheckpoint, TruncatedFileIsNamed) {
    fs::copy_file(fs::path(src_) / "model.safetensors", dir_ / "model.safetensors");
    fs::resize_file(dir_ / "model.safetensors", fs::file_size(dir_ / "model.safetensors") - 4096);
    std::string err = load_error();
    EXPECT_NE(err.find("truncated"), std::string::npos) << err;
    EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
}

TEST_F(BrokenCheckpoint, UnknownModelTypeAndMissingFiles) {
    fs::copy_file(fs::path(src_) / "model.safetensors", dir_ / "model.safetensors");
    std::ofstream(dir_ / "config.json") << R"({"model_type": "qwen3"})";
    EXPECT_NE(load_error().find("unsupported model_type 'qwen3'"), std::string::npos) << load_error();
    std::ofstream(dir_ / "config.json") << "{broken";
    EXPECT_NE(load_error().find("config.json is not valid JSON"), std::string::npos) << load_error();
    fs::remove(dir_ / "config.json");
    EXPECT_NE(load_error().find("config.json"), std::string::npos) << load_error();
}

TEST_F(BrokenCheckpoint, ShardIndexMustMatchShards) {
    fs::path b = test::data_path("v4/v4_tiny_b");
    for (const auto& e : fs::directory_iterator(b)) fs::copy_file(e.path(), dir_ / e.path().filename(), fs::copy_options::overwrite_existing);
    fs::remove(dir_ / "model-00002-of-00005.safetensors");
    EXPECT_NE(load_error().find("model-00002-of-00005.safetensors"), std::string::npos) << load_error();
}

}  // namespace
}  // namespace deepinfer::model
