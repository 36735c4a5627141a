#pragma once
// A grammar compiled for one vocabulary: the pushdown automaton plus per-state facts the mask
// computation uses. Immutable once built, so one instance is shared by every matcher on every
// thread.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/pda.h"
#include "grammar/vocabulary.h"

namespace deepinfer::grammar {

class CompiledGrammar {
public:
    CompiledGrammar(Pda pda, std::shared_ptr<const Vocabulary> vocabulary);

    const Pda& pda() const { return pda_; }
    const Vocabulary& vocabulary() const { return *vocabulary_; }
    const std::shared_ptr<const Vocabulary>& shared_vocabulary() const { return vocabulary_; }
    // The vocabulary slice whose every character loops on `state` (see vocabulary.h), or -1.
    int32_t slice_of_state(int32_t state) const { return slice_of_state_[state]; }
    // The language is empty (e.g. the JSON schema `false`): no token and no EOS is ever allowed.
    bool accepts_nothing() const { return pda_.start() == Pda::kDead; }

private:
    bool loops_on_slice(int32_t state, const VocabularySlice& slice) const;

    Pda pda_;
    std::shared_ptr<const Vocabulary> vocabulary_;
    std::vector<int32_t> slice_of_state_;
};

}  // namespace deepinfer::grammar
