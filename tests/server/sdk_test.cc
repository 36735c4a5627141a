// The official OpenAI Node SDK (npm `openai`, installed by scripts/setup.sh into
// tests/server/sdk) as a client of `deepinfer serve`: tests/server/sdk/sdk_client.mjs runs its
// checks through the SDK's own types and exits non-zero on the first failure.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "tests/server/serve_process.h"

namespace deepinfer {
namespace {

TEST(OpenAiNodeSdk, CompletionsChatStreamingToolsAndErrors) {
    std::string sdk_dir = std::string(DEEPINFER_SOURCE_DIR) + "/tests/server/sdk";
    ASSERT_TRUE(std::filesystem::exists(sdk_dir + "/node_modules/openai/package.json"))
        << "the OpenAI Node SDK is not installed: run scripts/setup.sh";
    test::ServeProcess server({"--model", test::nano_model_dir()}, {"DEEPINFER_API_KEY=sdk-test-key"});
    ASSERT_GT(server.port(), 0);
    std::string cmd = "node " + sdk_dir + "/sdk_client.mjs http://127.0.0.1:" + std::to_string(server.port()) + "/v1 sdk-test-key 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    std::array<char, 4096> buf{};
    while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
    int status = pclose(p);
    EXPECT_EQ(status, 0) << out;
    EXPECT_NE(out.find("SDK checks passed"), std::string::npos) << out;
}

}  // namespace
}  // namespace deepinfer
