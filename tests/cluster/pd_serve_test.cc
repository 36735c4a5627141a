// Prefill/decode disaggregation between `deepinfer serve` processes on loopback, with the bundled
// model: a decode instance that takes each prompt's state from a prefill instance must answer
// exactly (text and log-probabilities) as a single instance that computed everything itself, for
// concurrent requests; the transfer must really have happened (the decode side's metrics count
// it and its prefix cache served the prompt); a prefill instance that cannot be reached costs
// only a local prefill, never an answer.
#include <gtest/gtest.h>

#include <random>

#include "tests/cluster/cluster_util.h"

namespace deepinfer::test {
namespace {

using nlohmann::json;

class PdServe : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        reference_ = new ServeProcess(instance_args({"--no-prefix-cache"}));
        prefill_ = new ServeProcess(instance_args({"--role", "prefill"}));
        std::string at = "127.0.0.1:" + std::to_string(prefill_->port());
        decode_ = new ServeProcess(instance_args({"--role", "decode", "--prefill-instance", at}));
    }
    static void TearDownTestSuite() {
        delete decode_;
        delete prefill_;
        delete reference_;
    }
    static ServeProcess *reference_, *prefill_, *decode_;
};
ServeProcess *PdServe::reference_ = nullptr, *PdServe::prefill_ = nullptr, *PdServe::decode_ = nullptr;

TEST_F(PdServe, DecodeInstanceAnswersAsASingleInstance) {
    ASSERT_GT(reference_->port(), 0);
    ASSERT_GT(prefill_->port(), 0);
    ASSERT_GT(decode_->port(), 0);
    uint32_t seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::vector<json> prompts = make_prompts(6, seed);
    std::vector<json> expected = complete_all(reference_->port(), prompts);
    std::vector<json> got = complete_all(decode_->port(), prompts);
    for (size_t i = 0; i < prompts.size(); ++i) {
        ASSERT_FALSE(expected[i].contains("error")) << expected[i].dump();
        EXPECT_EQ(got[i], expected[i]) << "prompt " << i;
    }
    int port = decode_->port();
    EXPECT_EQ(metric(port, "deepinfer_pd_transfers_total{result=\"ok\",transport=\"ucx\"}"), static_cast<double>(prompts.size()));
    EXPECT_GT(metric(port, "deepinfer_pd_transfer_bytes_total"), 0);
    // TTFT split: each call's remote prefill and transfer are counted apart.
    EXPECT_EQ(metric(port, "deepinfer_ttft_transfer_seconds_count"), static_cast<double>(prompts.size()));
    EXPECT_GT(metric(port, "deepinfer_ttft_prefill_seconds_sum"), 0);
    EXPECT_EQ(metric(port, "deepinfer_ttft_first_decode_seconds_count"), static_cast<double>(prompts.size()));
    // The prompts' state came from the prefill instance: the decode side's cache served it.
    EXPECT_GT(metric(port, "deepinfer_prefix_cache_tier_hit_tokens_total{model=\"deepinfer-nano\",tier=\"host\"}"), 0);
    EXPECT_GT(metric(prefill_->port(), "deepinfer_requests_total{endpoint=\"/internal/prefill\",status=\"200\"}"), 0);
}

// A request may name its prefill instance; one that is not there costs a local prefill only.
TEST_F(PdServe, UnreachablePrefillFallsBackToLocalPrefill) {
    ASSERT_GT(decode_->port(), 0);
    std::vector<json> prompts = make_prompts(2, std::random_device{}());
    std::vector<json> expected = complete_all(reference_->port(), prompts);
    double failed_before = metric(decode_->port(), "deepinfer_pd_transfers_total{result=\"failed\",transport=\"ucx\"}");
    // Port 1 on loopback: nothing listens there (connection refused).
    std::vector<json> got = complete_all(decode_->port(), prompts, {{"X-DeepInfer-Prefill", "127.0.0.1:1"}});
    EXPECT_EQ(got, expected);
    EXPECT_EQ(metric(decode_->port(), "deepinfer_pd_transfers_total{result=\"failed\",transport=\"ucx\"}"), failed_before + 2);
}

// The state may also travel in the HTTP reply's body (no UCX on either side, or asked for).
TEST_F(PdServe, StateInTheHttpBodyAnswersTheSame) {
    ASSERT_GT(decode_->port(), 0);
    std::vector<json> prompts = make_prompts(2, std::random_device{}());
    std::vector<json> expected = complete_all(reference_->port(), prompts);
    double before = metric(decode_->port(), "deepinfer_pd_transfers_total{result=\"ok\",transport=\"http\"}");
    std::vector<json> got = complete_all(decode_->port(), prompts, {{"X-DeepInfer-Transport", "http"}});
    EXPECT_EQ(got, expected);
    EXPECT_EQ(metric(decode_->port(), "deepinfer_pd_transfers_total{result=\"ok\",transport=\"http\"}"), before + 2);
}

// A prompt shorter than one prefix-cache span has no state to ship: the decode instance computes
// it without asking (asking would compute it twice), from its very first call on.
TEST_F(PdServe, PromptShorterThanASpanIsComputedWithoutAsking) {
    ASSERT_GT(prefill_->port(), 0);
    ServeProcess fresh(instance_args({"--role", "decode", "--prefill-instance", "127.0.0.1:" + std::to_string(prefill_->port())}));
    ASSERT_GT(fresh.port(), 0);
    json prompt = json::array();
    std::mt19937 rng(std::random_device{}());
    for (int i = 0; i < 20; ++i) prompt.push_back(2 + static_cast<int>(rng() % 4000));
    auto asked = [&] { return metric(prefill_->port(), "deepinfer_requests_total{endpoint=\"/internal/prefill\",status=\"200\"}"); };
    double asked_before = asked();
    EXPECT_EQ(complete(fresh.port(), prompt), complete(reference_->port(), prompt));
    EXPECT_EQ(metric(fresh.port(), "deepinfer_pd_transfers_total{result=\"skipped\",transport=\"none\"}"), 1);
    EXPECT_EQ(asked(), asked_before);
}

TEST_F(PdServe, BadPrefillCallsAreRefusedCleanly) {
    ASSERT_GT(prefill_->port(), 0);
    for (const std::string body : {"", "{}", R"({"prompts":[[]]})", R"({"prompts":[[-1]]})", R"({"prompts":[[99999999]]})", "[1,2",
                                   R"({"prompts":[[5]],"ucx_address":7,"transfer":1})", R"({"prompts":[[5]],"ucx_address":"ab"})"}) {
        auto r = client(prefill_->port()).Post("/internal/prefill", body, "application/json");
        ASSERT_TRUE(r) << body;
        EXPECT_EQ(r->status, 400) << body;
    }
    auto r = client(decode_->port()).Post("/internal/prefill", R"({"prompts":[[5,6,7]]})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403);
}

}  // namespace
}  // namespace deepinfer::test
