#pragma once
// A grammar compiled for one vocabulary: the pushdown automaton plus per-state facts the mask
// computation uses. Immutable once built except for lazily filled per-state caches (atomic, so one
// instance is shared by every matcher on every thread).
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/mask_cache.h"
#include "grammar/pda.h"
#include "grammar/vocabulary.h"

namespace deepinfer::grammar {

class CompiledGrammar {
public:
    CompiledGrammar(Pda pda, std::shared_ptr<const Vocabulary> vocabulary);

    const Pda& pda() const { return pda_; }
    const Vocabulary& vocabulary() const { return *vocabulary_; }
    const std::shared_ptr<const Vocabulary>& shared_vocabulary() const { return vocabulary_; }
    // How a vocabulary slice (see vocabulary.h) fits a state: every string of up to `chars`
    // characters of the slice keeps the state alive (chars == VocabularySlice::kMaxChars: at least
    // that many); `exact`: every longer one kills it. Computed on first use and remembered.
    struct SliceFit {
        int32_t slice = -1;
        int32_t chars = 0;
        bool exact = false;
        // The members up to `chars` characters are exactly the slice tokens the state allows.
        bool usable() const { return slice >= 0 && chars > 0 && (exact || chars == VocabularySlice::kMaxChars); }
    };
    SliceFit slice_fit(int32_t state) const;
    // The ASCII bytes that lead from `state` back to itself (lazily computed, remembered): every
    // string of them keeps the state where it is.
    struct AsciiLoop {
        uint64_t bytes[2];
        bool non_ascii;  // every non-ASCII character leads back to the state too
    };
    AsciiLoop ascii_loop(int32_t state) const;
    // Masks of configurations that were expensive to compute (see mask_cache.h).
    MaskCache& mask_cache() const { return mask_cache_; }
    // The language is empty (e.g. the JSON schema `false`): no token and no EOS is ever allowed.
    bool accepts_nothing() const { return pda_.start() == Pda::kDead; }

private:
    static constexpr int32_t kUnknown = -2;
    // Byte classes of the product of a slice's one-character automaton and the grammar.
    struct SliceClasses {
        std::vector<uint8_t> representative;  // one byte per joint class
    };

    SliceFit fit(int32_t state, int32_t slice) const;
    AsciiLoop compute_ascii_loop(int32_t state) const;
    bool loops_on_non_ascii(int32_t state) const;

    Pda pda_;
    std::shared_ptr<const Vocabulary> vocabulary_;
    std::vector<SliceClasses> slice_classes_;
    std::unique_ptr<std::atomic<int32_t>[]> slice_fit_;  // packed SliceFit, kUnknown before first use
    std::unique_ptr<std::atomic<uint64_t>[]> ascii_loop_;
    mutable MaskCache mask_cache_{size_t{4} << 20};  // [3 * states]: two words, then a ready flag
};

}  // namespace deepinfer::grammar
