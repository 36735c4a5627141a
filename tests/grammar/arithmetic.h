#pragma once
// An arithmetic grammar (recursive: parenthesized sums) and a hand-written recursive-descent
// recognizer of the same language, the independent reference for EBNF outputs.
#include <string>

namespace deepinfer::test {

inline constexpr const char* kArithmetic = R"ebnf(
# sums of products of numbers, variables and parenthesized sums
root   ::= sum
sum    ::= product (("+" | "-") product)*
product::= factor ("*" factor)*
factor ::= number | name | "(" sum ")" | "-" factor
number ::= [0-9]{1,4} ("." [0-9]{1,3})?
name   ::= [a-z] [a-z0-9_]{0,4}
)ebnf";

// The same with at most 4 terms per sum, 3 factors per product and 3 signs in a row, so that a
// model writing at random reaches an end.
inline constexpr const char* kBoundedArithmetic = R"ebnf(
root   ::= sum
sum    ::= product (("+" | "-") product){0,3}
product::= factor ("*" factor){0,2}
factor ::= "-"{0,3} (number | name | "(" sum ")")
number ::= [0-9]{1,4} ("." [0-9]{1,3})?
name   ::= [a-z] [a-z0-9_]{0,4}
)ebnf";

// The same languages, recognized independently (0 = no bound).
class Arithmetic {
public:
    static bool accepts(const std::string& s, int max_terms = 0, int max_factors = 0, int max_signs = 0) {
        Arithmetic p{s, max_terms, max_factors, max_signs};
        return p.sum() && p.i_ == s.size();
    }

private:
    Arithmetic(const std::string& s, int max_terms, int max_factors, int max_signs)
        : s_(s), max_terms_(max_terms), max_factors_(max_factors), max_signs_(max_signs) {}
    static bool within(int count, int bound) { return bound == 0 || count <= bound; }
    char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
    static bool digit(char c) { return c >= '0' && c <= '9'; }
    static bool lower(char c) { return c >= 'a' && c <= 'z'; }
    bool sum() {
        if (!product()) return false;
        for (int terms = 2; peek() == '+' || peek() == '-'; ++terms) {
            ++i_;
            if (!within(terms, max_terms_) || !product()) return false;
        }
        return true;
    }
    bool product() {
        if (!factor()) return false;
        for (int factors = 2; peek() == '*'; ++factors) {
            ++i_;
            if (!within(factors, max_factors_) || !factor()) return false;
        }
        return true;
    }
    bool factor() {
        int signs = 0;
        for (; peek() == '-'; ++i_) ++signs;
        if (!within(signs, max_signs_)) return false;
        if (digit(peek())) {
            size_t digits = 0;
            for (; digit(peek()); ++i_) ++digits;
            if (digits > 4) return false;
            if (peek() == '.') {
                size_t n = 0;
                for (++i_; digit(peek()); ++i_) ++n;
                return n >= 1 && n <= 3;
            }
            return true;
        }
        if (lower(peek())) {
            size_t n = 0;
            for (++i_; lower(peek()) || digit(peek()) || peek() == '_'; ++i_) ++n;
            return n <= 4;
        }
        if (peek() == '(') {
            ++i_;
            if (!sum() || peek() != ')') return false;
            ++i_;
            return true;
        }
        return false;
    }
    const std::string& s_;
    int max_terms_, max_factors_, max_signs_;
    size_t i_ = 0;
};

}  // namespace deepinfer::test
