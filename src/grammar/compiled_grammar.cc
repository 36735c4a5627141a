#include "grammar/compiled_grammar.h"

#include <algorithm>

namespace deepinfer::grammar {

CompiledGrammar::CompiledGrammar(Pda pda, std::shared_ptr<const Vocabulary> vocabulary)
    : pda_(std::move(pda)), vocabulary_(std::move(vocabulary)), slice_of_state_(pda_.num_states(), -1) {
    const auto& slices = vocabulary_->slices();
    for (int32_t k = 0; k < static_cast<int32_t>(slices.size()); ++k) {
        // Cheap filter first: a qualifying state must loop on some one-byte member of the class.
        const Dfa& one = slices[k].one_char;
        int probe = -1;
        for (int b : {'a', ' ', '0'})
            if (one.step(one.start, uint8_t(b)) != Dfa::kDead) probe = b;
        for (int32_t s = 1; s < pda_.num_states(); ++s) {
            if (slice_of_state_[s] >= 0) continue;
            if (probe >= 0 && pda_.step(s, uint8_t(probe)) != s) continue;
            if (loops_on_slice(s, slices[k])) slice_of_state_[s] = k;
        }
    }
}

// Every character of the slice's class leads from `state` back to `state` (so every partial
// character stays alive too).
bool CompiledGrammar::loops_on_slice(int32_t state, const VocabularySlice& slice) const {
    const Dfa& one = slice.one_char;
    std::vector<std::pair<int32_t, int32_t>> todo{{one.start, state}}, seen = todo;
    while (!todo.empty()) {
        auto [u, q] = todo.back();
        todo.pop_back();
        for (int b = 0; b < 256; ++b) {
            int32_t u2 = one.step(u, uint8_t(b));
            if (u2 == Dfa::kDead) continue;
            int32_t q2 = pda_.step(q, uint8_t(b));
            if (q2 == Pda::kDead) return false;
            if (one.accepting[u2]) {
                if (q2 != state) return false;
                continue;
            }
            std::pair<int32_t, int32_t> next{u2, q2};
            if (std::find(seen.begin(), seen.end(), next) == seen.end()) seen.push_back(next), todo.push_back(next);
        }
    }
    return true;
}

}  // namespace deepinfer::grammar
