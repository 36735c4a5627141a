#include "grammar/encoding.h"

#include "grammar/grammar_error.h"

namespace deepinfer::grammar {

CodepointSet scalar_values() {
    CodepointSet s = CodepointSet::range(0, 0xD7FF);
    s.add_range(0xE000, CodepointSet::kMax);
    return s;
}

std::vector<std::vector<std::pair<uint32_t, uint32_t>>> digit_range_runs(uint32_t lo, uint32_t hi, uint32_t base, int width) {
    using Run = std::vector<std::pair<uint32_t, uint32_t>>;
    std::vector<Run> out;
    if (lo > hi) return out;
    if (width == 1) return {Run{{lo, hi}}};
    uint32_t unit = 1;
    for (int i = 1; i < width; ++i) unit *= base;
    uint32_t lo_head = lo / unit, hi_head = hi / unit, lo_tail = lo % unit, hi_tail = hi % unit;
    auto prefixed = [&](std::pair<uint32_t, uint32_t> head, uint32_t a, uint32_t b) {
        for (Run& r : digit_range_runs(a, b, base, width - 1)) {
            r.insert(r.begin(), head);
            out.push_back(std::move(r));
        }
    };
    if (lo_head == hi_head) {
        prefixed({lo_head, lo_head}, lo_tail, hi_tail);
        return out;
    }
    if (lo_tail != 0) prefixed({lo_head, lo_head}, lo_tail, unit - 1), ++lo_head;
    bool split_last = hi_tail != unit - 1;
    if (split_last) --hi_head;
    if (lo_head <= hi_head) prefixed({lo_head, hi_head}, 0, unit - 1);
    if (split_last) prefixed({hi_head + 1, hi_head + 1}, 0, hi_tail);
    return out;
}

namespace {

void utf8_bytes(uint32_t c, uint8_t* out, int& n) {
    if (c < 0x80) n = 1, out[0] = uint8_t(c);
    else if (c < 0x800) n = 2, out[0] = uint8_t(0xC0 | (c >> 6)), out[1] = uint8_t(0x80 | (c & 0x3F));
    else if (c < 0x10000)
        n = 3, out[0] = uint8_t(0xE0 | (c >> 12)), out[1] = uint8_t(0x80 | ((c >> 6) & 0x3F)), out[2] = uint8_t(0x80 | (c & 0x3F));
    else
        n = 4, out[0] = uint8_t(0xF0 | (c >> 18)), out[1] = uint8_t(0x80 | ((c >> 12) & 0x3F)),
        out[2] = uint8_t(0x80 | ((c >> 6) & 0x3F)), out[3] = uint8_t(0x80 | (c & 0x3F));
}

// Byte-range sequences for a range of scalars whose encodings have one length: split until the
// range is a product of byte ranges.
void utf8_range(Grammar& g, uint32_t lo, uint32_t hi, std::vector<ExprId>& out) {
    static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, CodepointSet::kMax};
    for (uint32_t end : kLengthEnds)
        if (lo <= end && hi > end) {
            utf8_range(g, lo, end, out);
            utf8_range(g, end + 1, hi, out);
            return;
        }
    for (int i = 1; i < 4; ++i) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if ((lo & m) != 0) {
            utf8_range(g, lo, lo | m, out);
            utf8_range(g, (lo | m) + 1, hi, out);
            return;
        }
        if ((hi & m) != m) {
            utf8_range(g, lo, (hi & ~m) - 1, out);
            utf8_range(g, hi & ~m, hi, out);
            return;
        }
    }
    uint8_t a[4], b[4];
    int n = 0;
    utf8_bytes(lo, a, n);
    utf8_bytes(hi, b, n);
    std::vector<ExprId> parts;
    for (int k = 0; k < n; ++k) parts.push_back(g.bytes(ByteSet::range(a[k], b[k])));
    out.push_back(g.seq(parts));
}

ExprId hex_digit(Grammar& g, uint32_t lo, uint32_t hi) {
    ByteSet set;
    for (uint32_t d = lo; d <= hi; ++d) {
        if (d < 10) set.add(uint8_t('0' + d));
        else set.add(uint8_t('a' + d - 10)), set.add(uint8_t('A' + d - 10));
    }
    return g.bytes(set);
}

// \uXXXX for every code unit in [lo, hi].
void json_unit_escapes(Grammar& g, uint32_t lo, uint32_t hi, std::vector<ExprId>& out) {
    for (const auto& run : digit_range_runs(lo, hi, 16, 4)) {
        std::vector<ExprId> parts{g.literal("\\u")};
        for (auto [a, b] : run) parts.push_back(hex_digit(g, a, b));
        out.push_back(g.seq(parts));
    }
}

// Surrogate-pair escapes for supplementary code points [lo, hi].
void json_pair_escapes(Grammar& g, uint32_t lo, uint32_t hi, std::vector<ExprId>& out) {
    uint32_t a = lo - 0x10000, b = hi - 0x10000;
    uint32_t high_a = a >> 10, high_b = b >> 10;
    auto pair = [&](uint32_t high_lo, uint32_t high_hi, uint32_t low_lo, uint32_t low_hi) {
        std::vector<ExprId> highs, lows;
        json_unit_escapes(g, 0xD800 + high_lo, 0xD800 + high_hi, highs);
        json_unit_escapes(g, 0xDC00 + low_lo, 0xDC00 + low_hi, lows);
        out.push_back(g.seq({g.alt(highs), g.alt(lows)}));
    };
    if (high_a == high_b) return pair(high_a, high_a, a & 0x3FF, b & 0x3FF);
    if ((a & 0x3FF) != 0) pair(high_a, high_a, a & 0x3FF, 0x3FF), ++high_a;
    bool split_last = (b & 0x3FF) != 0x3FF;
    if (split_last) --high_b;
    if (high_a <= high_b) pair(high_a, high_b, 0, 0x3FF);
    if (split_last) pair(high_b + 1, high_b + 1, 0, b & 0x3FF);
}

}  // namespace

ExprId utf8_class(Grammar& g, const CodepointSet& set) {
    std::vector<ExprId> alts;
    CodepointSet scalars = set.intersect(scalar_values());
    for (const auto& r : scalars.ranges()) utf8_range(g, r.lo, r.hi, alts);
    return g.alt(alts);
}

ExprId encode_class(Grammar& g, const CodepointSet& set, CharEncoding encoding) {
    if (encoding == CharEncoding::kUtf8) return utf8_class(g, set);
    CodepointSet scalars = set.intersect(scalar_values());
    CodepointSet needs_escape = CodepointSet::range(0, 0x1F);
    needs_escape.add('"');
    needs_escape.add('\\');
    std::vector<ExprId> alts{utf8_class(g, scalars.minus(needs_escape))};
    if (encoding == CharEncoding::kJsonMinimal) {
        CodepointSet escaped = scalars.intersect(needs_escape);
        for (const auto& r : escaped.ranges()) json_unit_escapes(g, r.lo, r.hi, alts);
        static constexpr std::pair<uint32_t, char> kRequired[] = {{'"', '"'}, {'\\', '\\'}, {8, 'b'}, {12, 'f'}, {10, 'n'}, {13, 'r'}, {9, 't'}};
        for (auto [c, letter] : kRequired)
            if (scalars.contains(c)) alts.push_back(g.literal(std::string{'\\', letter}));
        return g.alt(alts);
    }
    static constexpr std::pair<uint32_t, char> kShort[] = {{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {8, 'b'},
                                                           {12, 'f'},  {10, 'n'},    {13, 'r'}, {9, 't'}};
    for (auto [c, letter] : kShort)
        if (scalars.contains(c)) alts.push_back(g.literal(std::string{'\\', letter}));
    for (const auto& r : scalars.ranges()) {
        if (r.lo <= 0xFFFF) json_unit_escapes(g, r.lo, std::min<uint32_t>(r.hi, 0xFFFF), alts);
        if (r.hi >= 0x10000) json_pair_escapes(g, std::max<uint32_t>(r.lo, 0x10000), r.hi, alts);
    }
    return g.alt(alts);
}

ExprId encode_string(Grammar& g, std::string_view text, CharEncoding encoding) {
    std::vector<ExprId> parts;
    size_t pos = 0;
    while (pos < text.size()) {
        uint32_t c = 0;
        if (!decode_utf8(text, pos, c)) grammar_fail("string literal is not valid UTF-8");
        if (encoding == CharEncoding::kUtf8) {
            std::string bytes;
            append_utf8(bytes, c);
            parts.push_back(g.literal(bytes));
        } else {
            parts.push_back(encode_class(g, CodepointSet::of(c), encoding));
        }
    }
    return g.seq(parts);
}

void append_utf8(std::string& out, uint32_t codepoint) {
    uint8_t bytes[4];
    int n = 0;
    utf8_bytes(codepoint, bytes, n);
    out.append(reinterpret_cast<const char*>(bytes), n);
}

std::string json_canonical_content(std::string_view text) {
    static const char* kHex = "0123456789abcdef";
    std::string out;
    for (char ch : text) {
        uint8_t c = static_cast<uint8_t>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) out += std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
                else out += ch;
        }
    }
    return out;
}

int hex_digit_value(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

bool read_hex(std::string_view text, size_t& pos, int count, uint32_t& value) {
    uint32_t v = 0;
    for (int i = 0; i < count; ++i) {
        if (pos + i >= text.size() || hex_digit_value(text[pos + i]) < 0) return false;
        v = v * 16 + static_cast<uint32_t>(hex_digit_value(text[pos + i]));
    }
    pos += count;
    value = v;
    return true;
}

bool decode_utf8(std::string_view text, size_t& pos, uint32_t& codepoint) {
    auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
    uint8_t lead = byte(pos);
    int n = lead < 0x80 ? 1 : lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
    if (n == 0 || pos + n > text.size()) return false;
    uint32_t c = n == 1 ? lead : n == 2 ? lead & 0x1F : n == 3 ? lead & 0x0F : lead & 0x07;
    for (int k = 1; k < n; ++k) {
        if ((byte(pos + k) & 0xC0) != 0x80) return false;
        c = (c << 6) | (byte(pos + k) & 0x3F);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < kMinForLength[n] || c > CodepointSet::kMax || (c >= 0xD800 && c <= 0xDFFF)) return false;
    codepoint = c;
    pos += n;
    return true;
}

}  // namespace deepinfer::grammar
