// The prefix cache's parts on their own: the stored-entry format rejects every damaged byte and
// every truncation (checked against a byte-for-byte copy that must pass), and the index evicts
// least recently used leaves first, so each tier stays closed under prefixes.
#include <gtest/gtest.h>

#include <random>

#include "runtime/cache/prefix_blob.h"
#include "runtime/cache/prefix_index.h"

namespace deepinfer::runtime {
namespace {

model::PrefixGeometry small_geometry() {
    model::PrefixGeometry g;
    g.span_tokens = 16;
    g.blocks_per_span = {2, 1};
    g.block_bytes = {96, 160};
    g.carry_bytes = 48;
    return g;
}

// A sealed blob of random content, and what it was made from.
struct SealedBlob {
    explicit SealedBlob(uint32_t seed) : layout(small_geometry()), bytes(layout.max_bytes()) {
        std::mt19937 rng(seed);
        for (auto& t : tokens) t = static_cast<int32_t>(rng() % 1000);
        key = chain_key(kNamespace, {}, tokens);
        begin_blob(bytes.data(), layout, {kNamespace, key, {}, tokens, true});
        for (int64_t i = layout.payload_offset(); i < layout.max_bytes(); ++i) bytes[i] = static_cast<std::byte>(rng());
        size = seal_blob(bytes.data(), layout);
    }
    std::string check(std::span<const std::byte> b) const { return check_blob(b, layout, kNamespace, key); }
    static constexpr uint64_t kNamespace = 77;
    BlobLayout layout;
    std::vector<std::byte> bytes;
    std::array<int32_t, 16> tokens{};
    PrefixKey key;
    int64_t size = 0;
};

TEST(PrefixBlob, RejectsEveryFlippedByteAndEveryTruncation) {
    uint32_t seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    SealedBlob b(seed);
    ASSERT_EQ(b.size, b.layout.max_bytes());
    ASSERT_EQ(b.check(b.bytes), "");
    EXPECT_TRUE(blob_has_carries(b.bytes.data()));
    for (int64_t i = 0; i < b.size; ++i) {
        std::vector<std::byte> bad = b.bytes;
        bad[i] ^= std::byte{0x20};
        EXPECT_NE(b.check(bad), "") << "a flipped byte at " << i << " passed";
    }
    for (int64_t n : {int64_t{0}, int64_t{40}, b.layout.payload_offset(), b.size - 1})
        EXPECT_NE(b.check({b.bytes.data(), static_cast<size_t>(n)}), "") << "truncated to " << n;
    EXPECT_NE(check_blob(b.bytes, b.layout, SealedBlob::kNamespace + 1, b.key), "");  // another model
    EXPECT_NE(check_blob(b.bytes, b.layout, SealedBlob::kNamespace, chain_key(1, {}, b.tokens)), "");
}

TEST(PrefixKeyChain, DependsOnEveryTokenBefore) {
    std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 3, 5};
    PrefixKey ka = chain_key(1, {}, a), kb = chain_key(1, {}, b);
    EXPECT_FALSE(ka == kb);
    EXPECT_FALSE(chain_key(1, ka, a) == chain_key(1, kb, a));  // same span, different parents
    EXPECT_FALSE(chain_key(1, {}, a) == chain_key(2, {}, a));  // another namespace
    EXPECT_EQ(ka.hex().size(), 32u);
}

TEST(PrefixIndex, EvictsLeastRecentlyUsedLeavesFirst) {
    PrefixIndex index;
    PrefixKey a{0, 1}, b{0, 2}, c{0, 3}, d{0, 4};
    for (auto [key, parent, depth] : {std::tuple{a, PrefixKey{}, 0}, {b, a, 1}, {c, b, 2}, {d, a, 1}})
        index.set_on_device(index.insert(key, parent, depth), true);
    index.touch(*index.find(c));  // a is the least recently used, but has children on the device
    auto any = [](const PrefixNode&) { return true; };
    EXPECT_EQ(index.lru_leaf(PrefixTier::kDevice, any)->key, d);
    index.set_on_device(*index.find(d), false);
    index.erase_if_unused(*index.find(d));
    EXPECT_EQ(index.find(d), nullptr);
    EXPECT_EQ(index.lru_leaf(PrefixTier::kDevice, any)->key, c);
    index.set_on_device(*index.find(c), false);
    EXPECT_EQ(index.lru_leaf(PrefixTier::kDevice, any)->key, b);
    // A span kept in host memory keeps its hollow parents in the index for its chain.
    index.set_host(*index.find(c), PrefixNode::HostState::kReady);
    index.set_on_device(*index.find(b), false);
    index.erase_if_unused(*index.find(b));
    EXPECT_NE(index.find(b), nullptr);
    index.set_host(*index.find(c), PrefixNode::HostState::kNone);
    index.erase_if_unused(*index.find(c));  // the last holder goes: so do b, and a once off the device
    EXPECT_EQ(index.find(b), nullptr);
    EXPECT_EQ(index.lru_leaf(PrefixTier::kDevice, any)->key, a);
}

}  // namespace
}  // namespace deepinfer::runtime
