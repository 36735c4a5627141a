#pragma once
// Grammars for JSON numbers and integers, optionally bounded (minimum, maximum, exclusive forms).
// Bounds are exact over plain decimal notation; a bounded number is therefore generated without an
// exponent (comparing an exponent with a digit count is not a regular language). Unbounded numbers
// allow exponents; integers allow 1.0-style zero fractions and non-negative exponents (1e3).
#include <optional>
#include <string>
#include <vector>

#include "grammar/dfa.h"
#include "grammar/grammar_ir.h"

namespace deepinfer::grammar {

// An exact decimal: sign, integer digits without leading zeros ("0" for zero), fraction digits
// without trailing zeros.
struct Decimal {
    bool negative = false;
    std::string int_digits = "0";
    std::string frac_digits;

    bool is_zero() const { return int_digits == "0" && frac_digits.empty(); }
    bool is_integer() const { return frac_digits.empty(); }
    std::string to_string() const;
};

// Parses JSON number text ("-1.50e+2" gives -150). Returns nullopt on bad syntax or an exponent
// beyond +-400 digits.
std::optional<Decimal> parse_decimal(const std::string& text);

struct NumberBound {
    Decimal value;
    bool exclusive = false;
};

struct NumberConstraints {
    bool integer = false;
    bool plain_integers = false;  // integers without "1.0" or "1e3" spellings (drafts 3 and 4)
    std::vector<NumberBound> lower, upper;
};

ExprId number_grammar(Grammar& g, const NumberConstraints& constraints);
// Every plain-decimal spelling of exactly `value` (1, 1.0, 1.00...; 0 and -0).
ExprId number_equal_to(Grammar& g, const Decimal& value);

// Plain decimals (no exponent) that are integer multiples of `step` (> 0): the digits are read
// modulo step's significant digits. Throws GrammarError when the automaton would be too large.
Dfa multiple_of_dfa(const Decimal& step);

}  // namespace deepinfer::grammar
