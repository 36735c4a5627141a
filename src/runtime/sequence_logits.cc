#include "runtime/sequence_logits.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace deepinfer::runtime {
namespace {

// Step lengths for the schedule, in order.
std::vector<int64_t> step_lengths(int64_t total, const LogitsSchedule& s) {
    std::vector<int64_t> steps;
    if (s.decode_from >= 0) {
        DI_CHECK(s.decode_from <= total, "--decode-from {} is beyond the {} input tokens", s.decode_from, total);
        if (s.decode_from > 0) steps.push_back(s.decode_from);
        for (int64_t i = s.decode_from; i < total; ++i) steps.push_back(1);
        return steps;
    }
    int64_t chunk = s.chunk > 0 ? s.chunk : total;
    for (int64_t done = 0; done < total; done += chunk) steps.push_back(std::min(chunk, total - done));
    return steps;
}

}  // namespace

Tensor sequence_logits(model::CausalLm& m, const std::vector<int32_t>& ids, const LogitsSchedule& schedule) {
    int64_t total = static_cast<int64_t>(ids.size()), vocab = m.vocab_size();
    DI_CHECK(total > 0, "no input tokens");
    for (int32_t id : ids) DI_CHECK(id >= 0 && id < vocab, "token id {} is out of range for a vocabulary of {}", id, vocab);
    auto cache = m.make_cache(m.plan_cache_for_tokens(1, total));
    int state = cache->try_add_sequence();
    DI_CHECK(state >= 0 && cache->reserve(state, total), "cache: cannot reserve {} tokens", total);
    Tensor out = Tensor::empty(DType::kF32, {total, vocab});
    int64_t done = 0;
    for (int64_t len : step_lengths(total, schedule)) {
        model::Batch step;
        step.append(ids, done, static_cast<int32_t>(len), state);
        for (int32_t r = 0; r < len; ++r) step.logit_rows.push_back(r);
        cache->describe(step);
        Tensor logits = m.forward(step, *cache);
        m.backend().download(logits, out.data<float>() + done * vocab);
        done += len;
    }
    return out;
}

}  // namespace deepinfer::runtime
