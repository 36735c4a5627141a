#include "tokenizer/engram_token_map.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <unordered_map>

#include "base/error.h"
#include "tokenizer/bpe.h"

namespace deepinfer::tokenizer {
namespace {

constexpr UChar32 kSentinel = 0xE000;  // private use: keeps a lone space through the strip

icu::UnicodeString collapse_ascii_whitespace(const icu::UnicodeString& in) {
    icu::UnicodeString out;
    bool in_run = false;
    for (int32_t i = 0; i < in.length(); ++i) {
        char16_t c = in.charAt(i);
        bool ws = c == ' ' || c == '\t' || c == '\r' || c == '\n';
        if (ws && !in_run) out.append(static_cast<char16_t>(' '));
        if (!ws) out.append(c);
        in_run = ws;
    }
    return out;
}

icu::UnicodeString strip_white_space(const icu::UnicodeString& in) {
    int32_t begin = 0, end = in.length();
    while (begin < end && u_hasBinaryProperty(in.char32At(begin), UCHAR_WHITE_SPACE)) begin = in.moveIndex32(begin, 1);
    while (end > begin) {
        int32_t prev = in.moveIndex32(end, -1);
        if (!u_hasBinaryProperty(in.char32At(prev), UCHAR_WHITE_SPACE)) break;
        end = prev;
    }
    return icu::UnicodeString(in, begin, end - begin);
}

}  // namespace

std::string engram_normalize(std::string_view utf8) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(status);
    const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
    DI_CHECK(U_SUCCESS(status), "ICU normalizers are unavailable ({})", u_errorName(status));
    icu::UnicodeString text = icu::UnicodeString::fromUTF8(icu::StringPiece(utf8.data(), static_cast<int32_t>(utf8.size())));
    icu::UnicodeString decomposed = nfd->normalize(nfkc->normalize(text, status), status);
    DI_CHECK(U_SUCCESS(status), "ICU normalisation failed ({})", u_errorName(status));
    icu::UnicodeString lowered;
    for (int32_t i = 0; i < decomposed.length(); i = decomposed.moveIndex32(i, 1)) {
        UChar32 c = decomposed.char32At(i);
        if (U_GET_GC_MASK(c) & U_GC_M_MASK) continue;  // accents and other marks
        icu::UnicodeString one(c);
        lowered += one.toLower(icu::Locale::getRoot());  // per character, like Rust's char::to_lowercase
    }
    icu::UnicodeString t = collapse_ascii_whitespace(lowered);
    if (t == icu::UnicodeString(" ")) t = icu::UnicodeString(kSentinel);
    t = strip_white_space(t);
    t.findAndReplace(icu::UnicodeString(kSentinel), icu::UnicodeString(" "));
    std::string out;
    t.toUTF8String(out);
    return out;
}

EngramTokenMap engram_token_map(const Tokenizer& tok) {
    EngramTokenMap map;
    std::unordered_map<std::string, int32_t> classes;
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
        int32_t one[1] = {id};
        std::string text = tok.decode(one, /*skip_special_tokens=*/false);
        std::string key;
        if (text.find("\xEF\xBF\xBD") != std::string::npos) {  // U+FFFD: part of a UTF-8 character
            for (unsigned char b : tok.token_bytes(id)) key += byte_to_chars()[b];
        } else {
            key = engram_normalize(text);
            if (key.empty()) key = text;
        }
        auto [it, inserted] = classes.emplace(key, static_cast<int32_t>(classes.size()));
        map.class_of.push_back(it->second);
    }
    map.num_classes = static_cast<int32_t>(classes.size());
    return map;
}

}  // namespace deepinfer::tokenizer
