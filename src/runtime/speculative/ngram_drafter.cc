#include <algorithm>

#include "base/error.h"
#include "runtime/speculative/drafter.h"

namespace deepinfer::runtime {

NgramDrafter::NgramDrafter(int ngram_min, int ngram_max) : ngram_min_(ngram_min), ngram_max_(ngram_max) {}

std::vector<int32_t> NgramDrafter::propose(std::span<const int32_t> tokens, int max_tokens) const {
    const int64_t len = static_cast<int64_t>(tokens.size());
    if (max_tokens <= 0) return {};
    for (int64_t n = std::min<int64_t>(ngram_max_, len - 1); n >= ngram_min_; --n) {
        std::span<const int32_t> suffix = tokens.subspan(len - n);
        // Latest earlier occurrence first: recent text predicts what comes next best. A match
        // must be followed by at least one token before the suffix itself.
        for (int64_t at = len - n - 1; at >= 0; --at) {
            if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + at)) continue;
            int64_t from = at + n, count = std::min<int64_t>(max_tokens, len - from);
            return {tokens.begin() + from, tokens.begin() + from + count};
        }
    }
    return {};
}

std::shared_ptr<const Drafter> make_drafter(const SpeculativeConfig& c) {
    if (!c.enabled()) return nullptr;
    DI_CHECK(c.num_draft_tokens >= 1 && c.num_draft_tokens <= 64, "speculative: num_draft_tokens {} is not in [1, 64]",
             c.num_draft_tokens);
    if (c.drafter) return c.drafter;
    if (c.method == "ngram") {
        DI_CHECK(c.ngram_min >= 1 && c.ngram_max >= c.ngram_min, "speculative: n-gram lengths [{}, {}] are not a range >= 1",
                 c.ngram_min, c.ngram_max);
        return std::make_unique<NgramDrafter>(c.ngram_min, c.ngram_max);
    }
    if (c.method == "dspark" || c.method == "mtp") return std::make_unique<ModelDrafter>();
    DI_CHECK(false, "speculative: unknown method '{}' (available: ngram, dspark, mtp, off)", c.method);
    return nullptr;
}

}  // namespace deepinfer::runtime
