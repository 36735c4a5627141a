// The hybrid cache's block accounting (with DeepSeek-V4's layout): a memory plan admits every sequence it was sized for, a full
// pool refuses a reservation without changing anything, and freed blocks come back.
#include "model/hybrid_cache.h"

#include <gtest/gtest.h>

#include "kernels/backend.h"
#include "model/archs/deepseek_v4.h"
#include "model/archs/deepseek_v41.h"
#include "model/config_file.h"
#include "tests/test_util.h"

namespace deepinfer::model {
namespace {

constexpr int kCsa = 0, kHca = 1;  // DeepSeek-V4 block groups

TEST(HybridCache, MemoryPlanHoldsEverySequenceItWasSizedFor) {
    DeepseekV4Config c = load_deepseek_v4_config(test::data_path("v4/v4_tiny_a"));
    auto backend = kernels::make_cpu_backend(1);
    for (int seqs : {1, 7, 40}) {
        CacheSizing s = cache_for_memory(v4_cache_layout(c), seqs, 4 << 20, 4);
        HybridCache cache(v4_cache_layout(c), *backend, s);
        EXPECT_LE(cache.bytes(), 4 << 20);
        int64_t per_seq = s.tokens_per_seq;
        EXPECT_GT(per_seq, 0);
        for (int i = 0; i < seqs; ++i) {
            int st = cache.try_add_sequence();
            ASSERT_GE(st, 0);
            EXPECT_TRUE(cache.reserve(st, per_seq)) << seqs << " sequences, sequence " << i << ", " << per_seq << " tokens";
        }
        EXPECT_EQ(cache.try_add_sequence(), -1);
    }
}

TEST(HybridCache, FullPoolRefusesWithoutSideEffectsAndFreesOnRemove) {
    DeepseekV4Config c = load_deepseek_v4_config(test::data_path("v4/v4_tiny_a"));
    auto backend = kernels::make_cpu_backend(1);
    CacheSizing s = cache_for_tokens(v4_cache_layout(c), 2, 64, 4);  // 2 sequences x 64 tokens
    HybridCache cache(v4_cache_layout(c), *backend, s);
    int a = cache.add_sequence(), b = cache.add_sequence();
    ASSERT_TRUE(cache.reserve(a, 128));  // a takes b's share
    int64_t free_csa = cache.free_blocks(kCsa), free_hca = cache.free_blocks(kHca);
    std::vector<int32_t> table_a(cache.block_table(kCsa, a).begin(), cache.block_table(kCsa, a).end());
    EXPECT_FALSE(cache.reserve(b, 64));
    EXPECT_EQ(cache.free_blocks(kCsa), free_csa);
    EXPECT_EQ(cache.free_blocks(kHca), free_hca);
    EXPECT_TRUE(cache.block_table(kCsa, b).empty());
    cache.truncate(a, 64);
    EXPECT_TRUE(cache.reserve(b, 64));
    auto tb = cache.block_table(kCsa, b);
    for (int32_t blk : tb)  // b's blocks are ones a gave back, never a's live ones
        EXPECT_EQ(std::count(table_a.begin(), table_a.begin() + cache.block_table(kCsa, a).size(), blk), 0);
    cache.remove_sequence(a);
    EXPECT_EQ(cache.free_sequences(), 1);
    EXPECT_GT(cache.usage(), 0.0);
}

// DeepSeek-V4.1 layout: a shared prefix's blocks stay allocated until every holder lets go.
TEST(HybridCache, SharedPrefixBlocksAreReferenceCounted) {
    DeepseekV41Config c = parse_deepseek_v41_config(read_config_json(test::data_path("v41/v41_tiny_a")));
    auto backend = kernels::make_cpu_backend(1);
    CacheLayout layout = v41_cache_layout(c);
    HybridCache cache(layout, *backend, cache_for_tokens(layout, 3, 96, 4));
    EXPECT_EQ(cache.prefix_alignment(), 8);  // 4 entries per block at ratio 2
    int a = cache.add_sequence(), b = cache.add_sequence();
    ASSERT_TRUE(cache.reserve(a, 40));
    int64_t free0 = cache.free_blocks(0), free1 = cache.free_blocks(1);
    const PrefixGeometry& g = cache.prefix_geometry();
    EXPECT_EQ(g.span_tokens, 8);
    EXPECT_EQ(g.blocks_per_span[0], 1);
    EXPECT_EQ(g.blocks_per_span[1], 2);
    EXPECT_EQ(g.carry_bytes, 0);  // pairs do not straddle a span boundary
    for (int grp = 0; grp < 2; ++grp) {  // b takes a's first 32 positions
        auto table = cache.blocks_of(a, grp);
        cache.adopt_blocks(b, grp, table.subspan(0, 4 * g.blocks_per_span[grp]));
    }
    EXPECT_EQ(cache.free_blocks(0), free0);      // shared, not copied
    EXPECT_EQ(cache.block_table(0, b).size(), 4u);
    EXPECT_EQ(cache.block_table(1, b).size(), 8u);
    ASSERT_TRUE(cache.reserve(b, 48));           // b grows with blocks of its own
    EXPECT_EQ(cache.free_blocks(0), free0 - 2);
    cache.remove_sequence(a);                     // a's unshared tail frees, the shared prefix stays
    EXPECT_EQ(cache.free_blocks(0), free0 - 2 + 1);
    EXPECT_EQ(cache.free_blocks(1), free1 - 4 + 2);
    cache.remove_sequence(b);
    EXPECT_EQ(cache.free_blocks(0), free0 + 5);
    EXPECT_EQ(cache.free_blocks(1), free1 + 10);
}

}  // namespace
}  // namespace deepinfer::model
