#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deepinfer::tokenizer {
namespace {

// Unicode White_Space (Oniguruma's \s), as PCRE2 class items.
constexpr const char* kWhiteSpaceItems =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// GPT-2's pattern, used by ByteLevel when use_regex is true.
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

}  // namespace

std::string oniguruma_to_pcre2(const std::string& p) {
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < p.size(); ++i) {
        char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            char n = p[i + 1];
            ++i;
            if (n == 's') {
                out += in_class ? std::string(kWhiteSpaceItems) : "[" + std::string(kWhiteSpaceItems) + "]";
            } else if (n == 'S') {
                DI_CHECK(!in_class, "tokenizer regex: \\S inside a character class is not supported");
                out += "[^" + std::string(kWhiteSpaceItems) + "]";
            } else {
                out += c;
                out += n;
            }
            continue;
        }
        if (c == '[' && !in_class) in_class = true;
        else if (c == ']' && in_class) in_class = false;
        out += c;
    }
    return out;
}

class Regex {
public:
    explicit Regex(const std::string& pattern) {
        std::string translated = oniguruma_to_pcre2(pattern);
        int err = 0;
        PCRE2_SIZE offset = 0;
        code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), PCRE2_UTF | PCRE2_UCP,
                              &err, &offset, nullptr);
        if (code_ == nullptr) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof(msg));
            fail("tokenizer regex does not compile at offset {}: {} ({})", offset, reinterpret_cast<char*>(msg), pattern);
        }
        jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
    }
    ~Regex() { pcre2_code_free(code_); }
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Calls on_match(begin, end) for each successive non-overlapping match in `s`.
    template <typename F>
    void for_each_match(std::string_view s, F&& on_match) const {
        pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
        PCRE2_SIZE start = 0;
        while (start <= s.size()) {
            auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
            int rc = jit_ ? pcre2_jit_match(code_, subject, s.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr)
                          : pcre2_match(code_, subject, s.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
            if (rc < 0) break;
            PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            if (ov[1] == ov[0]) {  // empty match: step over one character
                start = ov[1] + 1;
                while (start < s.size() && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) ++start;
                continue;
            }
            on_match(ov[0], ov[1]);
            start = ov[1];
        }
        pcre2_match_data_free(md);
    }

private:
    pcre2_code* code_ = nullptr;
    bool jit_ = false;
};

struct PreTokenizer::Step {
    bool keep_matches = true;  // Split "Isolated" (and ByteLevel's regex) keep matches; "Removed" drops them
    std::unique_ptr<Regex> regex;  // null: the step leaves pieces as they are
};

PreTokenizer::PreTokenizer(const nlohmann::json& spec) {
    if (!spec.is_null()) add_step(spec);
}

PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::add_step(const nlohmann::json& spec) {
    std::string type = spec.value("type", "");
    if (type == "Sequence") {
        for (const auto& s : spec.at("pretokenizers")) add_step(s);
        return;
    }
    auto step = std::make_unique<Step>();
    if (type == "Split") {
        const auto& pattern = spec.at("pattern");
        DI_CHECK(pattern.contains("Regex"), "tokenizer.json: only Regex Split patterns are supported");
        DI_CHECK(!spec.value("invert", false), "tokenizer.json: inverted Split is not supported");
        std::string behavior = spec.value("behavior", "");
        DI_CHECK(behavior == "Isolated" || behavior == "Removed", "tokenizer.json: Split behavior '{}' is not supported",
                 behavior);
        step->keep_matches = behavior == "Isolated";
        step->regex = std::make_unique<Regex>(pattern["Regex"].get<std::string>());
    } else if (type == "ByteLevel") {
        // Prepending a space changes what the regex sees; no tokenizer we ship needs it.
        DI_CHECK(!spec.value("add_prefix_space", false), "tokenizer.json: ByteLevel add_prefix_space is not supported");
        if (spec.value("use_regex", true)) step->regex = std::make_unique<Regex>(kGpt2Pattern);
    } else {
        fail("tokenizer.json: pre-tokenizer '{}' is not supported", type);
    }
    steps_.push_back(std::move(step));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
    out.clear();
    out.push_back(text);
    std::vector<std::string_view> next;
    for (const auto& step : steps_) {
        if (!step->regex) continue;
        next.clear();
        for (std::string_view p : out) {
            size_t last = 0;
            step->regex->for_each_match(p, [&](size_t b, size_t e) {
                if (b > last) next.push_back(p.substr(last, b - last));
                if (step->keep_matches) next.push_back(p.substr(b, e - b));
                last = e;
            });
            if (p.size() > last) next.push_back(p.substr(last));
        }
        out.swap(next);
    }
}

}  // namespace deepinfer::tokenizer
