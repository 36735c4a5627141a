#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {
namespace {

// Width of the sequence a lead byte starts (0 = never a lead byte).
int lead_width(uint8_t b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

// The allowed range of the second byte depends on the lead byte (excludes overlongs, surrogates
// and code points past U+10FFFF).
bool second_ok(uint8_t lead, uint8_t b) {
    switch (lead) {
        case 0xE0: return b >= 0xA0 && b <= 0xBF;
        case 0xED: return b >= 0x80 && b <= 0x9F;
        case 0xF0: return b >= 0x90 && b <= 0xBF;
        case 0xF4: return b >= 0x80 && b <= 0x8F;
        default: return b >= 0x80 && b <= 0xBF;
    }
}

enum class Seq { kValid, kInvalid, kIncomplete };

// Classifies the sequence at s[i]; `len` = bytes of a valid char, or of the invalid prefix.
Seq classify(std::string_view s, size_t i, size_t& len) {
    uint8_t lead = static_cast<uint8_t>(s[i]);
    int width = lead_width(lead);
    if (width == 0) {
        len = 1;
        return Seq::kInvalid;
    }
    for (int k = 1; k < width; ++k) {
        if (i + k >= s.size()) {
            len = s.size() - i;
            return Seq::kIncomplete;
        }
        uint8_t b = static_cast<uint8_t>(s[i + k]);
        bool ok = k == 1 ? second_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
        if (!ok) {
            len = k;
            return Seq::kInvalid;
        }
    }
    len = width;
    return Seq::kValid;
}

}  // namespace

size_t find_invalid_utf8(std::string_view s) {
    size_t i = 0, len = 0;
    while (i < s.size()) {
        if (static_cast<uint8_t>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        if (classify(s, i, len) != Seq::kValid) return i;
        i += len;
    }
    return std::string_view::npos;
}

std::string utf8_lossy(std::string_view s, bool keep_incomplete_tail, size_t* tail_len) {
    static constexpr char kReplacement[] = "\xEF\xBF\xBD";
    std::string out;
    out.reserve(s.size());
    if (tail_len) *tail_len = 0;
    size_t i = 0, len = 0;
    while (i < s.size()) {
        if (static_cast<uint8_t>(s[i]) < 0x80) {
            out.push_back(s[i++]);
            continue;
        }
        switch (classify(s, i, len)) {
            case Seq::kValid: out.append(s.substr(i, len)); break;
            case Seq::kInvalid: out.append(kReplacement); break;
            case Seq::kIncomplete:
                if (keep_incomplete_tail) {
                    if (tail_len) *tail_len = len;
                    return out;
                }
                out.append(kReplacement);
                break;
        }
        i += len;
    }
    return out;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

uint32_t next_code_point(std::string_view s, size_t& i) {
    uint8_t b = static_cast<uint8_t>(s[i]);
    int width = lead_width(b);
    if (width <= 1) {
        ++i;
        return b;
    }
    uint32_t cp = b & (0xFF >> (width + 1));
    for (int k = 1; k < width; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
    i += width;
    return cp;
}

}  // namespace deepinfer::tokenizer
