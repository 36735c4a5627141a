#include "grammar/regex.h"

#include "grammar/grammar_error.h"

namespace deepinfer::grammar {

CodepointSet digit_class() { return CodepointSet::range('0', '9'); }

CodepointSet word_class() {
    CodepointSet s = CodepointSet::range('a', 'z');
    s.add_range('A', 'Z');
    s.add_range('0', '9');
    s.add('_');
    return s;
}

CodepointSet space_class() {
    CodepointSet s = CodepointSet::range('\t', '\r');
    for (uint32_t c : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu}) s.add(c);
    s.add_range(0x2000, 0x200A);
    return s;
}

namespace {

constexpr int32_t kMaxRepeat = 100000;

class RegexParser {
public:
    explicit RegexParser(std::string_view pattern) : text_(pattern) {}

    Regex run() {
        do {
            RegexBranch branch{};
            branch.anchored_start = eat_anchors('^');
            branch.node = parse_sequence(/*top_level=*/true, &branch.anchored_end);
            out_.branches.push_back(branch);
        } while (eat('|'));
        if (pos_ < text_.size()) fail(text_[pos_] == ')' ? "unmatched ')'" : "unexpected character");
        return std::move(out_);
    }

private:
    [[noreturn]] void fail(const char* why) const { grammar_fail("bad regex at offset {}: {}", pos_, why); }
    bool at_end() const { return pos_ >= text_.size(); }
    char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
    bool eat(char c) {
        if (at_end() || text_[pos_] != c) return false;
        ++pos_;
        return true;
    }
    bool eat_anchors(char anchor) {
        bool any = false;
        while (eat(anchor)) any = true;
        return any;
    }
    int32_t add(RegexNode n) {
        out_.nodes.push_back(std::move(n));
        return static_cast<int32_t>(out_.nodes.size() - 1);
    }
    int32_t add_set(CodepointSet set) { return add({RegexNode::Kind::kSet, std::move(set)}); }

    uint32_t next_codepoint() {
        uint32_t c = 0;
        if (!decode_utf8(text_, pos_, c)) fail("invalid UTF-8");
        return c;
    }

    int32_t parse_alternation() {
        std::vector<int32_t> alts{parse_sequence(false, nullptr)};
        while (eat('|')) alts.push_back(parse_sequence(false, nullptr));
        return alts.size() == 1 ? alts[0] : add({RegexNode::Kind::kAlt, {}, alts});
    }

    // A `$` is only allowed right before the end of a top-level alternative.
    int32_t parse_sequence(bool top_level, bool* anchored_end) {
        std::vector<int32_t> items;
        while (!at_end() && peek() != '|' && peek() != ')') {
            if (peek() == '$' || peek() == '^') {
                size_t at = pos_;
                bool dollar = peek() == '$';
                eat_anchors(peek());
                if (top_level && dollar && (at_end() || peek() == '|')) {
                    *anchored_end = true;
                    break;
                }
                pos_ = at;
                fail("anchor is only supported at the start or end of the pattern");
            }
            items.push_back(parse_quantified());
        }
        return add({RegexNode::Kind::kSeq, {}, items});
    }

    int32_t parse_quantified() {
        int32_t atom = parse_atom();
        int32_t min = 0, max = 0;
        if (eat('*')) min = 0, max = Grammar::kUnbounded;
        else if (eat('+')) min = 1, max = Grammar::kUnbounded;
        else if (eat('?')) min = 0, max = 1;
        else if (!parse_braces(min, max)) return atom;
        eat('?');  // lazy: same language
        int32_t a, b;
        size_t save = pos_;
        if (peek() == '*' || peek() == '+' || peek() == '?' || parse_braces(a, b)) pos_ = save, fail("nothing to repeat");
        return add({RegexNode::Kind::kRepeat, {}, {atom}, min, max});
    }

    // {n}, {n,}, {n,m}; anything else leaves the brace to be read as a literal.
    bool parse_braces(int32_t& min, int32_t& max) {
        if (peek() != '{') return false;
        size_t save = pos_++;
        auto number = [&](int32_t& v) {
            size_t start = pos_;
            int64_t value = 0;
            while (peek() >= '0' && peek() <= '9') value = std::min<int64_t>(value * 10 + (text_[pos_++] - '0'), kMaxRepeat + 1);
            v = static_cast<int32_t>(value);
            return pos_ > start;
        };
        if (!number(min)) return pos_ = save, false;
        max = min;
        if (eat(',')) {
            if (!number(max)) max = Grammar::kUnbounded;
        }
        if (!eat('}')) return pos_ = save, false;
        if (min > kMaxRepeat || max > kMaxRepeat) pos_ = save, fail("repetition count too large");
        if (max != Grammar::kUnbounded && max < min) pos_ = save, fail("numbers out of order in {} quantifier");
        return true;
    }

    int32_t parse_atom() {
        char c = peek();
        if (c == '*' || c == '+' || c == '?') fail("nothing to repeat");
        if (c == '{') {
            int32_t a, b;
            size_t save = pos_;
            if (parse_braces(a, b)) pos_ = save, fail("nothing to repeat");
        }
        if (eat('(')) return parse_group();
        if (eat('[')) return parse_class();
        if (eat('.')) {
            CodepointSet s = CodepointSet::all();
            for (uint32_t t : {0x0Au, 0x0Du, 0x2028u, 0x2029u}) s = s.minus(CodepointSet::of(t));
            return add_set(s);
        }
        if (eat('\\')) return add_set(parse_escape(false));
        return add_set(CodepointSet::of(next_codepoint()));
    }

    int32_t parse_group() {
        if (eat('?')) {
            if (eat(':')) {
            } else if (peek() == '<' && peek(1) != '=' && peek(1) != '!') {
                ++pos_;
                while (!at_end() && peek() != '>') ++pos_;
                if (!eat('>')) fail("unterminated group name");
            } else if (peek() == '=' || peek() == '!' || peek() == '<') {
                fail("lookaround is not supported");
            } else {
                fail("unsupported group flag");
            }
        }
        int32_t inner = parse_alternation();
        if (!eat(')')) fail("missing ')'");
        return inner;
    }

    int32_t parse_class() {
        bool negate = eat('^');
        CodepointSet set;
        while (!at_end() && peek() != ']') {
            size_t range_start = pos_;
            CodepointSet lo_set;
            bool lo_single = class_atom(lo_set);
            if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
                ++pos_;
                CodepointSet hi_set;
                bool hi_single = class_atom(hi_set);
                if (!lo_single || !hi_single) pos_ = range_start, fail("class escape used as a range bound");
                uint32_t lo = lo_set.ranges()[0].lo, hi = hi_set.ranges()[0].lo;
                if (lo > hi) pos_ = range_start, fail("range out of order in character class");
                set.add_range(lo, hi);
            } else {
                set.add(lo_set);
            }
        }
        if (!eat(']')) fail("missing ']'");
        return add_set(negate ? set.complement() : set);
    }

    // Reads one class member; returns true when it is a single character (usable in a range).
    bool class_atom(CodepointSet& out) {
        if (eat('\\')) {
            out = parse_escape(true);
            return out.ranges().size() == 1 && out.ranges()[0].lo == out.ranges()[0].hi;
        }
        out = CodepointSet::of(next_codepoint());
        return true;
    }

    uint32_t hex_digits(int count) {
        uint32_t v = 0;
        if (!read_hex(text_, pos_, count, v)) fail("bad hexadecimal escape");
        return v;
    }

    CodepointSet parse_escape(bool in_class);
    uint32_t parse_unicode_escape();

    std::string_view text_;
    size_t pos_ = 0;
    Regex out_;
};

uint32_t RegexParser::parse_unicode_escape() {
    if (eat('{')) {
        uint32_t v = 0;
        int digits = 0;
        while (peek() != '}' && !at_end()) v = v * 16 + hex_digits(1), ++digits;
        if (!eat('}') || digits == 0 || v > CodepointSet::kMax) fail("bad \\u{...} escape");
        return v;
    }
    uint32_t v = hex_digits(4);
    // A surrogate pair written as two escapes is one character.
    if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
        size_t save = pos_;
        pos_ += 2;
        uint32_t low = hex_digits(4);
        if (low >= 0xDC00 && low <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
        pos_ = save;
    }
    return v;
}

CodepointSet RegexParser::parse_escape(bool in_class) {
    size_t start = pos_ - 1;  // the backslash: errors point here
    if (at_end()) pos_ = start, fail("trailing backslash");
    char c = text_[pos_++];
    switch (c) {
        case 'd': return digit_class();
        case 'D': return digit_class().complement();
        case 'w': return word_class();
        case 'W': return word_class().complement();
        case 's': return space_class();
        case 'S': return space_class().complement();
        case 't': return CodepointSet::of('\t');
        case 'n': return CodepointSet::of('\n');
        case 'r': return CodepointSet::of('\r');
        case 'f': return CodepointSet::of('\f');
        case 'v': return CodepointSet::of('\v');
        case 'x': return CodepointSet::of(hex_digits(2));
        case 'u': return CodepointSet::of(parse_unicode_escape());
        case 'c': {
            char letter = peek();
            if (!((letter >= 'a' && letter <= 'z') || (letter >= 'A' && letter <= 'Z'))) pos_ = start, fail("bad \\c escape");
            ++pos_;
            return CodepointSet::of(static_cast<uint32_t>(letter) % 32);
        }
        case 'b':
            if (in_class) return CodepointSet::of('\b');
            pos_ = start;
            fail("word boundary \\b is not supported");
        case 'B': pos_ = start; fail("word boundary \\B is not supported");
        case 'p': case 'P': pos_ = start; fail("unicode property escapes are not supported");
        case 'k': pos_ = start; fail("backreferences are not supported");
        case '0':
            if (peek() >= '0' && peek() <= '9') pos_ = start, fail("octal escapes are not supported");
            return CodepointSet::of(0);
        default: break;
    }
    if (c >= '1' && c <= '9') pos_ = start, fail("backreferences are not supported");
    --pos_;
    return CodepointSet::of(next_codepoint());
}

ExprId lower_node(Grammar& g, const Regex& re, int32_t index, CharEncoding encoding) {
    const RegexNode& n = re.nodes[index];
    std::vector<ExprId> items;
    for (int32_t child : n.items) items.push_back(lower_node(g, re, child, encoding));
    switch (n.kind) {
        case RegexNode::Kind::kSet: return encode_class(g, n.set, encoding);
        case RegexNode::Kind::kSeq: return g.seq(items);
        case RegexNode::Kind::kAlt: return g.alt(items);
        case RegexNode::Kind::kRepeat: return g.repeat(items[0], n.min, n.max);
    }
    return g.nothing();
}

}  // namespace

Regex parse_regex(std::string_view pattern) { return RegexParser(pattern).run(); }

ExprId lower_regex(Grammar& g, const Regex& regex, CharEncoding encoding, RegexMatch match) {
    ExprId any = g.star(encode_class(g, CodepointSet::all(), encoding));
    std::vector<ExprId> branches;
    for (const RegexBranch& b : regex.branches) {
        ExprId body = lower_node(g, regex, b.node, encoding);
        bool search = match == RegexMatch::kSearch;
        branches.push_back(g.seq({search && !b.anchored_start ? any : g.empty(), body,
                                  search && !b.anchored_end ? any : g.empty()}));
    }
    return g.alt(branches);
}

}  // namespace deepinfer::grammar
