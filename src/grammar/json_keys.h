#pragma once
// Object keys other than the declared names, built directly (a trie of the names inside the
// automaton of all keys) instead of as a difference of two automata: one per object with
// additional properties, so it is on the compile path of most schemas.
#include <optional>
#include <string>
#include <vector>

#include "grammar/dfa.h"

namespace deepinfer::grammar {

// Quoted canonical keys ('"', characters of `key_char`, '"') that are none of `names`. `key_char`
// is one character in canonical spelling (a prefix-free automaton). nullopt when a name has a
// character JSON must escape (it has several spellings); the caller then uses dfa_product.
std::optional<Dfa> keys_except(const Dfa& key_char, const std::vector<std::string>& names);

}  // namespace deepinfer::grammar
