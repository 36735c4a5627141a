#pragma once
// A deterministic byte automaton without calls: the form regular pieces of a grammar take when they
// must be combined with operations an expression cannot state (intersection, difference), e.g. a
// string that must match a pattern and a length bound at once, or an object key that must not be
// one of the declared property names.
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace deepinfer::grammar {

struct Dfa {
    static constexpr int32_t kDead = -1;
    // Bound on the states of any automaton built by the operations below (GrammarError past it).
    static constexpr int32_t kMaxStates = 65536;

    std::array<uint8_t, 256> byte_class{};  // byte -> class
    int32_t num_classes = 1;
    std::vector<int32_t> next;              // [num_states * num_classes], kDead where no edge
    std::vector<uint8_t> accepting;         // [num_states]
    int32_t start = 0;

    int32_t num_states() const { return static_cast<int32_t>(accepting.size()); }
    int32_t step(int32_t state, uint8_t b) const { return next[size_t(state) * num_classes + byte_class[b]]; }
    bool matches(std::string_view text) const;
    bool language_is_empty() const;
};

enum class DfaProduct { kIntersection, kDifference };

// The product automaton of a and b (a ∩ b, or a minus b), restricted to useful states.
Dfa dfa_product(const Dfa& a, const Dfa& b, DfaProduct op);

// Drops states that are unreachable or cannot reach an accepting state; renumbers from 0.
Dfa dfa_trim(const Dfa& dfa);

// The minimal DFA of the same language (Moore's partition refinement), for automata built once and
// copied into many grammars (formats).
Dfa dfa_minimize(const Dfa& dfa);

// min..max (max < 0: unbounded) words of `unit`, whose language must be prefix-free (no word
// extends another, as with one encoded character). Built directly as (words read, position in a
// word) instead of unrolling copies, so long length bounds stay cheap to compile.
Dfa dfa_repeat(const Dfa& unit, int32_t min, int32_t max);

// `open` content `close`, when `close` can never follow a complete content word (so the wrapped
// automaton stays deterministic); nullopt otherwise.
std::optional<Dfa> dfa_enclose(const Dfa& content, uint8_t open, uint8_t close);

}  // namespace deepinfer::grammar
