#include "grammar/json_numbers.h"

#include "grammar/dfa.h"
#include "grammar/grammar_error.h"
#include "grammar/pda.h"

namespace deepinfer::grammar {

std::string Decimal::to_string() const {
    return (negative ? "-" : "") + int_digits + (frac_digits.empty() ? "" : "." + frac_digits);
}

std::optional<Decimal> parse_decimal(const std::string& text) {
    size_t i = 0;
    Decimal d;
    if (i < text.size() && text[i] == '-') d.negative = true, ++i;
    std::string digits;
    long point = -1;
    for (; i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.'); ++i) {
        if (text[i] == '.') {
            if (point >= 0) return std::nullopt;
            point = static_cast<long>(digits.size());
        } else {
            digits.push_back(text[i]);
        }
    }
    if (digits.empty()) return std::nullopt;
    if (point < 0) point = static_cast<long>(digits.size());
    if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
        size_t used = 0;
        long exponent = 0;
        try {
            exponent = std::stol(text.substr(i + 1), &used);
        } catch (...) {
            return std::nullopt;
        }
        if (used == 0 || exponent > 400 || exponent < -400) return std::nullopt;
        point += exponent;
        i += 1 + used;
    }
    if (i != text.size()) return std::nullopt;
    // Place the point, then strip leading zeros of the integer part and trailing zeros of the fraction.
    while (point < 0) digits.insert(digits.begin(), '0'), ++point;
    while (static_cast<long>(digits.size()) < point) digits.push_back('0');
    std::string int_part = digits.substr(0, point), frac = digits.substr(point);
    size_t nz = int_part.find_first_not_of('0');
    d.int_digits = nz == std::string::npos ? "0" : int_part.substr(nz);
    size_t last = frac.find_last_not_of('0');
    d.frac_digits = last == std::string::npos ? "" : frac.substr(0, last + 1);
    if (d.is_zero()) d.negative = false;
    return d;
}

namespace {

// Magnitude arithmetic on canonical digit strings.
std::string plus_one(std::string digits) {
    int i = static_cast<int>(digits.size()) - 1;
    while (i >= 0 && digits[i] == '9') digits[i--] = '0';
    if (i < 0) digits.insert(digits.begin(), '1');
    else ++digits[i];
    return digits;
}

std::string minus_one(std::string digits) {  // digits > 0
    int i = static_cast<int>(digits.size()) - 1;
    while (digits[i] == '0') digits[i--] = '9';
    --digits[i];
    size_t nz = digits.find_first_not_of('0');
    return nz == std::string::npos ? "0" : digits.substr(nz);
}

Decimal signed_step(Decimal d, int delta) {  // d integral
    bool up = (delta > 0) != d.negative;
    if (up) d.int_digits = plus_one(d.int_digits);
    else if (d.int_digits == "0") d.int_digits = "1", d.negative = delta < 0;
    else d.int_digits = minus_one(d.int_digits);
    if (d.is_zero()) d.negative = false;
    return d;
}

class NumberBuilder {
public:
    NumberBuilder(Grammar& g, bool integer, bool plain) : g_(g), integer_(integer), plain_(plain) {}

    ExprId digit(int lo, int hi) { return g_.bytes(ByteSet::range(uint8_t('0' + lo), uint8_t('0' + hi))); }
    ExprId digits_any() { return g_.star(digit(0, 9)); }
    ExprId canonical_int() { return g_.alt({g_.byte('0'), g_.seq({digit(1, 9), digits_any()})}); }
    // Any fraction part allowed for this kind of number ("" means none).
    ExprId any_frac() {
        if (integer_ && plain_) return g_.empty();
        return integer_ ? g_.optional(g_.seq({g_.byte('.'), g_.plus(g_.byte('0'))}))
                        : g_.optional(g_.seq({g_.byte('.'), g_.plus(digit(0, 9))}));
    }

    // Canonical non-negative integers compared with n (canonical digits).
    ExprId int_ge(const std::string& n) {
        size_t len = n.size();
        std::vector<ExprId> alts{g_.seq({digit(1, 9), g_.repeat(digit(0, 9), int32_t(len), Grammar::kUnbounded)}),
                                 g_.literal(n)};
        for (size_t i = 0; i < len; ++i) {
            int d = n[i] - '0';
            if (d == 9) continue;
            alts.push_back(g_.seq({g_.literal(n.substr(0, i)), digit(d + 1, 9), g_.repeat(digit(0, 9), int32_t(len - 1 - i), int32_t(len - 1 - i))}));
        }
        return g_.alt(alts);
    }
    ExprId int_le(const std::string& n) {
        size_t len = n.size();
        std::vector<ExprId> alts{g_.literal(n)};
        if (len >= 2) alts.push_back(g_.alt({g_.byte('0'), g_.seq({digit(1, 9), g_.repeat(digit(0, 9), 0, int32_t(len - 2))})}));
        for (size_t i = 0; i < len; ++i) {
            int lo = (i == 0 && len > 1) ? 1 : 0, d = n[i] - '0';
            if (d - 1 < lo) continue;
            alts.push_back(g_.seq({g_.literal(n.substr(0, i)), digit(lo, d - 1), g_.repeat(digit(0, 9), int32_t(len - 1 - i), int32_t(len - 1 - i))}));
        }
        return g_.alt(alts);
    }

    // Fraction parts f ("" = no fraction) with 0.f compared with 0.b (b canonical).
    ExprId frac_compare(const std::string& b, bool greater, bool strict) {
        if (integer_) return strict ? g_.nothing() : any_frac();
        ExprId dot = g_.byte('.');
        std::vector<ExprId> digit_alts;  // fraction digit strings (non-empty)
        for (size_t i = 0; i < b.size(); ++i) {
            int d = b[i] - '0';
            int lo = greater ? d + 1 : 0, hi = greater ? 9 : d - 1;
            if (lo <= hi) digit_alts.push_back(g_.seq({g_.literal(b.substr(0, i)), digit(lo, hi), digits_any()}));
        }
        bool none_ok;  // whether "no fraction" (value 0) satisfies the comparison
        if (greater) {
            none_ok = b.empty() && !strict;
            ExprId tail = strict ? g_.seq({digits_any(), digit(1, 9), digits_any()}) : digits_any();
            if (b.empty() && !strict) tail = g_.plus(digit(0, 9));
            digit_alts.push_back(g_.seq({g_.literal(b), tail}));
        } else {
            none_ok = !(b.empty() && strict);
            for (size_t i = 1; i < b.size(); ++i) digit_alts.push_back(g_.seq({g_.literal(b.substr(0, i)), g_.star(g_.byte('0'))}));
            if (!strict) digit_alts.push_back(b.empty() ? g_.plus(g_.byte('0')) : g_.seq({g_.literal(b), g_.star(g_.byte('0'))}));
        }
        ExprId with_digits = g_.seq({dot, g_.alt(digit_alts)});
        return none_ok ? g_.optional(with_digits) : with_digits;
    }

    // Non-negative decimals D compared with the non-negative bound b.
    ExprId magnitude_compare(const Decimal& b, bool greater, bool strict) {
        std::vector<ExprId> alts{g_.seq({g_.literal(b.int_digits), frac_compare(b.frac_digits, greater, strict)})};
        if (greater) alts.push_back(g_.seq({int_ge(plus_one(b.int_digits)), any_frac()}));
        else if (b.int_digits != "0") alts.push_back(g_.seq({int_le(minus_one(b.int_digits)), any_frac()}));
        return g_.alt(alts);
    }

    ExprId any_magnitude() { return g_.seq({canonical_int(), any_frac()}); }

    // Signed numbers v with v >= b (greater) or v <= b, strict for > and <.
    ExprId signed_compare(Decimal b, bool greater, bool strict) {
        if (integer_) {
            b = round_for_integers(b, greater, strict);
            strict = false;
        }
        ExprId minus = g_.byte('-');
        Decimal mag = b;
        mag.negative = false;
        if (greater) {
            if (!b.negative && !b.is_zero()) return magnitude_compare(mag, true, strict);
            if (b.is_zero())
                return strict ? magnitude_compare(mag, true, true)
                              : g_.alt({any_magnitude(), g_.seq({minus, magnitude_compare(mag, false, false)})});
            return g_.alt({any_magnitude(), g_.seq({minus, magnitude_compare(mag, false, strict)})});
        }
        if (b.negative) return g_.seq({minus, magnitude_compare(mag, true, strict)});
        if (b.is_zero())
            return strict ? g_.seq({minus, magnitude_compare(mag, true, true)})
                          : g_.alt({magnitude_compare(mag, false, false), g_.seq({minus, any_magnitude()})});
        return g_.alt({magnitude_compare(mag, false, strict), g_.seq({minus, any_magnitude()})});
    }

    // The integral bound equivalent to (b, strict) for integers: ceil / floor, one step for strict.
    static Decimal round_for_integers(Decimal b, bool greater, bool strict) {
        if (b.is_integer()) return strict ? signed_step(b, greater ? 1 : -1) : b;
        bool toward_zero = greater == b.negative;  // ceil of a negative, floor of a positive
        b.frac_digits.clear();
        if (!toward_zero) b = signed_step(b, greater ? 1 : -1);
        if (b.is_zero()) b.negative = false;
        return b;
    }

private:
    Grammar& g_;
    bool integer_, plain_;
};

}  // namespace

ExprId number_grammar(Grammar& g, const NumberConstraints& c) {
    NumberBuilder nb(g, c.integer, c.plain_integers);
    if (c.lower.empty() && c.upper.empty()) {
        if (c.integer && c.plain_integers) return g.seq({g.optional(g.byte('-')), nb.any_magnitude()});
        // Integers may only scale up (1e3), which keeps them integral.
        ByteSet e = ByteSet::of('e'), sign = ByteSet::of('+');
        e.add('E');
        if (!c.integer) sign.add('-');
        ExprId exponent = g.seq({g.bytes(e), g.optional(g.bytes(sign)), g.plus(nb.digit(0, 9))});
        return g.seq({g.optional(g.byte('-')), nb.any_magnitude(), g.optional(exponent)});
    }
    std::vector<ExprId> parts;
    for (const NumberBound& b : c.lower) parts.push_back(nb.signed_compare(b.value, true, b.exclusive));
    for (const NumberBound& b : c.upper) parts.push_back(nb.signed_compare(b.value, false, b.exclusive));
    if (parts.size() == 1) return parts[0];
    Dfa dfa = regular_dfa(g, parts[0]);
    for (size_t i = 1; i < parts.size(); ++i) dfa = dfa_product(dfa, regular_dfa(g, parts[i]), DfaProduct::kIntersection);
    return g.automaton(std::move(dfa));
}

ExprId number_equal_to(Grammar& g, const Decimal& value) {
    ExprId zeros = g.star(g.byte('0'));
    ExprId body = value.frac_digits.empty()
                      ? g.seq({g.literal(value.int_digits), g.optional(g.seq({g.byte('.'), g.plus(g.byte('0'))}))})
                      : g.seq({g.literal(value.int_digits + "." + value.frac_digits), zeros});
    if (value.is_zero()) return g.seq({g.optional(g.byte('-')), body});
    return value.negative ? g.seq({g.byte('-'), body}) : body;
}

Dfa multiple_of_dfa(const Decimal& step) {
    // step = modulus * 10^-scale; v is a multiple of step when v * 10^scale is an integer that the
    // modulus divides. Digits past `scale` fraction digits must then be zeros.
    std::string digits = step.int_digits + step.frac_digits;
    int64_t scale = static_cast<int64_t>(step.frac_digits.size());
    digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
    if (step.negative || step.is_zero()) grammar_fail("'multipleOf' must be greater than 0");
    if (digits.size() > 6 || (std::stoll(digits) * (scale + 2)) > 200000)
        grammar_fail("'multipleOf' {} needs too large an automaton", step.to_string());
    int64_t modulus = std::stoll(digits);
    std::vector<int64_t> pow10(scale + 1, 1 % modulus);
    for (int64_t i = 1; i <= scale; ++i) pow10[i] = pow10[i - 1] * 10 % modulus;
    // Classes: '-', '.', '0', '1'..'9' one each, everything else.
    Dfa d;
    d.byte_class.fill(12);
    d.byte_class['-'] = 0;
    d.byte_class['.'] = 1;
    for (int c = 0; c <= 9; ++c) d.byte_class['0' + c] = static_cast<uint8_t>(2 + c);
    d.num_classes = 13;
    // States: 0 start, 1 after '-', 2 integer part "0", then integer remainders r (3 + r), then
    // fraction states (remainder, fraction digits read 0..scale): 3 + modulus + r * (scale + 1) + j.
    int64_t num_states = 3 + modulus + modulus * (scale + 1);
    d.next.assign(size_t(num_states) * d.num_classes, Dfa::kDead);
    d.accepting.assign(num_states, 0);
    auto set = [&](int64_t from, int cls, int64_t to) { d.next[size_t(from) * d.num_classes + cls] = static_cast<int32_t>(to); };
    auto int_state = [&](int64_t r) { return 3 + r; };
    auto frac_state = [&](int64_t r, int64_t j) { return 3 + modulus + r * (scale + 1) + j; };
    for (int64_t s : {int64_t{0}, int64_t{1}}) {
        set(s, 2, 2);
        for (int c = 1; c <= 9; ++c) set(s, 2 + c, int_state(c % modulus));
    }
    set(0, 0, 1);
    d.accepting[2] = 1;
    set(2, 1, frac_state(0, 0));
    for (int64_t r = 0; r < modulus; ++r) {
        for (int c = 0; c <= 9; ++c) set(int_state(r), 2 + c, int_state((r * 10 + c) % modulus));
        set(int_state(r), 1, frac_state(r, 0));
        d.accepting[int_state(r)] = r * pow10[scale] % modulus == 0;
        for (int64_t j = 0; j <= scale; ++j) {
            if (j < scale)
                for (int c = 0; c <= 9; ++c) set(frac_state(r, j), 2 + c, frac_state((r * 10 + c) % modulus, j + 1));
            else
                set(frac_state(r, j), 2, frac_state(r, j));  // only zeros past the scale
            d.accepting[frac_state(r, j)] = j > 0 && r * pow10[scale - j] % modulus == 0;
        }
    }
    return dfa_trim(d);
}

}  // namespace deepinfer::grammar
