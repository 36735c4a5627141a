#pragma once
// A drafter for speculative-decoding tests that knows what decoding without drafts produced.
#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "runtime/speculative/drafter.h"

namespace deepinfer::test {

// Proposes what decoding without drafts produced (the sequence that continues the tokens so far),
// with one token made wrong at a place that depends on the length: drafts are kept and rejected
// at every position, and sometimes all are kept.
class OracleDrafter final : public runtime::Drafter {
public:
    OracleDrafter(std::vector<std::vector<int32_t>> sequences, int vocab) : sequences_(std::move(sequences)), vocab_(vocab) {}
    std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) const override {
        for (const auto& f : sequences_) {
            if (f.size() <= tokens.size() || !std::equal(tokens.begin(), tokens.end(), f.begin())) continue;
            std::vector<int32_t> d(f.begin() + tokens.size(), f.begin() + std::min(f.size(), tokens.size() + max_tokens));
            size_t wrong = (tokens.size() * 2654435761u >> 7) % (d.size() + 2);
            if (wrong < d.size()) d[wrong] = (d[wrong] + 1) % vocab_;
            return d;
        }
        return {};
    }

private:
    std::vector<std::vector<int32_t>> sequences_;
    int vocab_;
};

}  // namespace deepinfer::test
