// The framing of prefill state on the wire: what is encoded decodes to the same spans, and
// anything else (truncated, extended, another message) is refused with an error, never a crash.
#include <gtest/gtest.h>

#include "base/error.h"
#include "cluster/pd/span_wire.h"

namespace deepinfer::cluster {
namespace {

std::vector<std::vector<std::byte>> sample_spans() {
    std::vector<std::vector<std::byte>> spans;
    for (size_t n : {0u, 1u, 4097u}) {
        std::vector<std::byte>& s = spans.emplace_back(n);
        for (size_t i = 0; i < n; ++i) s[i] = std::byte(i * 7 + n);
    }
    return spans;
}

TEST(SpanWire, RoundTrips) {
    auto spans = sample_spans();
    EXPECT_EQ(decode_spans(encode_spans(spans)), spans);
    EXPECT_TRUE(decode_spans(encode_spans({})).empty());
}

TEST(SpanWire, MalformedMessagesAreRefused) {
    std::string wire = encode_spans(sample_spans());
    for (size_t cut : {size_t{0}, size_t{3}, size_t{6}, size_t{12}, wire.size() - 1})
        EXPECT_THROW(decode_spans(std::string_view(wire).substr(0, cut)), Error) << "cut at " << cut;
    EXPECT_THROW(decode_spans(wire + "x"), Error);
    std::string other = wire;
    other[0] = 'X';
    EXPECT_THROW(decode_spans(other), Error);
    std::string huge = wire;
    huge[15] = '\x7f';  // the first span's length, top byte: far past the message's end
    EXPECT_THROW(decode_spans(huge), Error);
}

}  // namespace
}  // namespace deepinfer::cluster
