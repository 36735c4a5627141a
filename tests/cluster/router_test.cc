// `deepinfer router` in front of `deepinfer serve` processes on loopback, with the bundled model:
// prefill/decode pairs answer as one instance does; a killed instance (replica, prefill or decode)
// loses no request silently
// (each gets its whole answer or an error); requests sharing a prefix land on the replica that
// holds it; streams pass through event by event; SIGTERM drains.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <random>

#include "tests/cluster/cluster_util.h"

namespace deepinfer::test {
namespace {

std::string at(const ServeProcess& p) { return "127.0.0.1:" + std::to_string(p.port()); }

std::unique_ptr<ServeProcess> start_router(std::vector<std::string> args) {
    args.insert(args.end(), {"--health-interval", "0.2"});
    return std::make_unique<ServeProcess>(args, std::vector<std::string>{}, "router");
}

TEST(Router, PrefillDecodePairsAnswerAsASingleInstance) {
    ServeProcess reference(instance_args({"--no-prefix-cache"}));
    ServeProcess p1(instance_args({"--role", "prefill"})), p2(instance_args({"--role", "prefill"}));
    ServeProcess d1(instance_args({"--role", "decode"})), d2(instance_args({"--role", "decode"}));
    for (auto* p : {&reference, &p1, &p2, &d1, &d2}) ASSERT_GT(p->port(), 0) << "an instance did not start";
    auto router = start_router({"--prefill", at(p1) + "," + at(p2), "--decode", at(d1) + "," + at(d2)});
    ASSERT_GT(router->port(), 0);
    uint32_t seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::vector<json> prompts = make_prompts(10, seed);
    std::vector<json> expected = complete_all(reference.port(), prompts);
    std::vector<json> got = complete_all(router->port(), prompts);
    for (size_t i = 0; i < prompts.size(); ++i) {
        ASSERT_FALSE(expected[i].contains("error")) << expected[i].dump();
        EXPECT_EQ(got[i], expected[i]) << "prompt " << i;
    }
    // Every request went through a prefill instance, and both pairs took part.
    double transfers = 0;
    for (auto* d : {&d1, &d2}) {
        double ok = metric(d->port(), "deepinfer_pd_transfers_total{result=\"ok\",transport=\"ucx\"}");
        EXPECT_GT(ok, 0) << "decode instance " << at(*d) << " got no request";
        transfers += ok;
    }
    EXPECT_EQ(transfers, static_cast<double>(prompts.size()));
    EXPECT_EQ(metric(router->port(), "deepinfer_router_calls_ok_total"), static_cast<double>(prompts.size()));
}

// Streams `max_tokens` tokens; returns how many arrived, or -1 when the stream reported an error
// (an HTTP error status, or an error event) — a stream that ends short without one is a silent loss.
int stream_tokens(int port, const json& prompt, int max_tokens, bool* errored) {
    json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}};
    std::string sse;
    auto r = client(port).Post("/v1/completions", {}, body.dump(), "application/json");
    *errored = !r || r->status != 200 || r->body.find("\"error\"") != std::string::npos;
    if (!r) return 0;
    int chunks = 0;
    bool done = r->body.find("data: [DONE]") != std::string::npos;
    for (size_t p = 0; (p = r->body.find("\"text_completion\"", p)) != std::string::npos; ++p) ++chunks;
    return done ? chunks : -chunks - 1;
}

using StreamCalls = std::vector<std::future<std::pair<int, bool>>>;

StreamCalls stream_all(int port, const std::vector<json>& prompts, int max_tokens) {
    StreamCalls calls;
    for (const auto& p : prompts)
        calls.push_back(std::async(std::launch::async, [=] {
            bool errored = false;
            int n = stream_tokens(port, p, max_tokens, &errored);
            return std::make_pair(n, errored);
        }));
    return calls;
}

// Every stream got its whole answer or an error; returns how many were whole.
int expect_whole_or_errored(StreamCalls& calls) {
    int whole = 0, errors = 0;
    for (auto& c : calls) {
        auto [n, errored] = c.get();
        if (errored) ++errors;
        else if (n >= 1) ++whole;
        else ADD_FAILURE() << "a stream ended short without an error (" << n << ")";
    }
    EXPECT_EQ(whole + errors, static_cast<int>(calls.size()));
    return whole;
}

// Polls `done` every 100 ms for up to two minutes.
bool wait_until(const std::function<bool()>& done) {
    for (int i = 0; i < 1200; ++i) {
        if (done()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
}

bool wait_for_metric(int port, const std::string& series, double at_least) {
    return wait_until([&] { return metric(port, series) >= at_least; });
}

TEST(Router, AKilledInstanceLosesNoRequestSilently) {
    ServeProcess a(instance_args()), b(instance_args());
    ASSERT_GT(a.port(), 0);
    ASSERT_GT(b.port(), 0);
    auto router = start_router({"--replica", at(a) + "," + at(b), "--cache-weight", "0"});
    ASSERT_GT(router->port(), 0);
    StreamCalls calls = stream_all(router->port(), make_prompts(8, std::random_device{}()), 64);
    // Once both instances are busy, one dies without a word.
    wait_for_metric(a.port(), "deepinfer_running_batch", 1);
    wait_for_metric(b.port(), "deepinfer_running_batch", 1);
    kill(b.pid(), SIGKILL);
    EXPECT_GT(expect_whole_or_errored(calls), 0);
    // A request that had streamed nothing moved to the live instance, or the stream said it broke.
    EXPECT_GE(metric(router->port(), "deepinfer_router_retries_total") + metric(router->port(), "deepinfer_router_broken_streams_total"), 1);
    b.terminate(5);
}

// The PD members die in turn: a prefill instance while it prefills (its decode partners compute
// those prompts themselves), then a decode instance while it decodes (its calls move or break
// with an error). No call is lost silently.
TEST(Router, KilledPrefillAndDecodeInstancesLoseNoRequestSilently) {
    ServeProcess p1(instance_args({"--role", "prefill"})), p2(instance_args({"--role", "prefill"}));
    ServeProcess d1(instance_args({"--role", "decode"})), d2(instance_args({"--role", "decode"}));
    for (auto* p : {&p1, &p2, &d1, &d2}) ASSERT_GT(p->port(), 0) << "an instance did not start";
    auto router = start_router({"--prefill", at(p1) + "," + at(p2), "--decode", at(d1) + "," + at(d2), "--cache-weight", "0"});
    ASSERT_GT(router->port(), 0);
    StreamCalls calls = stream_all(router->port(), make_prompts(12, std::random_device{}()), 96);
    ASSERT_TRUE(wait_for_metric(p2.port(), "deepinfer_running_batch", 1)) << "the second prefill instance got no work";
    kill(p2.pid(), SIGKILL);
    const std::string failed = "deepinfer_pd_transfers_total{result=\"failed\",transport=\"ucx\"}";
    EXPECT_TRUE(wait_until([&] { return metric(d1.port(), failed) + metric(d2.port(), failed) >= 1; }))
        << "no decode instance noticed the dead prefill instance";
    bool d2_busy = wait_for_metric(d2.port(), "deepinfer_running_batch", 1);
    kill(d2.pid(), SIGKILL);
    EXPECT_GT(expect_whole_or_errored(calls), 0);
    if (d2_busy)
        EXPECT_GE(metric(router->port(), "deepinfer_router_retries_total") + metric(router->port(), "deepinfer_router_broken_streams_total"), 1);
    // The survivors still answer as a pair.
    EXPECT_FALSE(complete(router->port(), make_prompts(1, 3)[0]).contains("error"));
    p2.terminate(5);
    d2.terminate(5);
}

TEST(Router, SharedPrefixLandsOnTheReplicaHoldingIt) {
    ServeProcess a(instance_args()), b(instance_args());
    ASSERT_GT(a.port(), 0);
    ASSERT_GT(b.port(), 0);
    auto router = start_router({"--replica", at(a) + "," + at(b)});
    ASSERT_GT(router->port(), 0);
    std::vector<json> prompts = make_prompts(6, std::random_device{}());
    // The even prompts share 600 tokens: after the first, each should go where it went.
    for (size_t i = 0; i < prompts.size(); i += 2) ASSERT_FALSE(complete(router->port(), prompts[i]).contains("error"));
    double on_a = metric(a.port(), "deepinfer_requests_total{endpoint=\"/v1/completions\",status=\"200\"}");
    double on_b = metric(b.port(), "deepinfer_requests_total{endpoint=\"/v1/completions\",status=\"200\"}");
    EXPECT_EQ(on_a + on_b, 3);
    EXPECT_TRUE(on_a == 0 || on_b == 0) << "shared-prefix requests were split: " << on_a << " / " << on_b;
    EXPECT_GT(metric(router->port(), "deepinfer_router_prefix_hit_chunks_total"), 0);
    int holder = on_a > 0 ? a.port() : b.port();
    EXPECT_GT(metric(holder, "deepinfer_prefix_cache_hit_tokens_total"), 0);
}

// Streams pass through as they are generated, event by event, not gathered into larger pieces.
TEST(Router, StreamsPassThroughEventByEvent) {
    ServeProcess a(instance_args());
    ASSERT_GT(a.port(), 0);
    auto router = start_router({"--replica", at(a)});
    ASSERT_GT(router->port(), 0);
    // About 60 events of ~200 bytes: less than the router's read buffer, so a router that waits
    // for the buffer to fill delivers them in one piece.
    json body = {{"prompt", make_prompts(1, 11)[0]}, {"max_tokens", 60}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}};
    int pieces = 0;
    std::string sse;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        ++pieces;
        sse.append(data, n);
        return true;
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    ASSERT_TRUE(client(router->port()).send(req, res, error)) << httplib::to_string(error);
    EXPECT_NE(sse.find("data: [DONE]"), std::string::npos);
    EXPECT_GE(pieces, 10) << "the stream arrived in " << pieces << " pieces";
}

TEST(Router, SigtermDrainsRunningRequests) {
    ServeProcess a(instance_args());
    ASSERT_GT(a.port(), 0);
    // A grace period longer than the stream takes on a loaded 2-core CI machine.
    auto router = start_router({"--replica", at(a), "--shutdown-grace", "600"});
    ASSERT_GT(router->port(), 0);
    json prompt = make_prompts(1, 7)[0];
    auto call = std::async(std::launch::async, [&] {
        bool errored = false;
        // Long enough to be still running when the signal comes.
        int n = stream_tokens(router->port(), prompt, 2000, &errored);
        return errored ? -1 : n;
    });
    for (int i = 0; i < 600 && metric(a.port(), "deepinfer_running_batch") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(call.wait_for(std::chrono::seconds(0)), std::future_status::timeout) << "the request ended before the signal";
    auto [status, seconds] = router->terminate(600);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the router did not exit cleanly";
    EXPECT_GE(call.get(), 1) << "the running request was not allowed to finish";
}

TEST(Router, BadInstanceListsAreRefused) {
    for (std::vector<std::string> args : {std::vector<std::string>{}, {"--prefill", "127.0.0.1:1"}, {"--replica", "nonsense"},
                                          {"--replica", "127.0.0.1:99999"}}) {
        ServeProcess r(args, {}, "router");
        EXPECT_EQ(r.port(), 0) << "the router started with a bad instance list";
    }
}

}  // namespace
}  // namespace deepinfer::test
