#pragma once
// Cache sizes for engine tests that force preemption: the least memory that still holds one
// sequence of a given length.
#include <algorithm>
#include <cstdint>

#include "base/error.h"
#include "deepinfer/config.h"
#include "kernels/backend.h"
#include "model/causal_lm.h"
#include "tests/test_util.h"

namespace deepinfer::test {

// The least cache memory (to 1/64) whose blocks hold `tokens` positions of one sequence beside
// the fixed state of c.cache.max_sequences sequences, with the spare rows the engine adds for
// speculative drafts (as EngineImpl raises rollback_tokens) and the draft model's own state (an MTP
// head's ring).
inline int64_t smallest_cache_for(const EngineConfig& c, int64_t tokens) {
    int slack = c.speculative.enabled() ? std::max(c.model.rollback_tokens, c.speculative.num_draft_tokens) : c.model.rollback_tokens;
    auto backend = kernels::make_backend(device(), 1);  // the engine's cache layout on its device
    const std::string& method = c.speculative.method;
    model::LoadOptions options;
    options.draft = method == "dspark" || method == "mtp";
    auto m = model::load_causal_lm(c.model.path, *backend, options);
    auto holds = [&](int64_t bytes) {
        try {
            return m->make_cache(m->plan_cache(c.cache.max_sequences, bytes, c.cache.block_size, slack))->token_capacity() >= tokens;
        } catch (const Error&) {  // not even the fixed state fits
            return false;
        }
    };
    int64_t lo = int64_t{1} << 16, hi = int64_t{1} << 20;  // a bracket: lo too small, hi enough
    while (!holds(hi)) lo = hi, hi *= 2;
    while (holds(lo)) hi = lo, lo /= 2;
    while (hi - lo > hi / 64) (holds((lo + hi) / 2) ? hi : lo) = (lo + hi) / 2;
    return hi;
}

}  // namespace deepinfer::test
