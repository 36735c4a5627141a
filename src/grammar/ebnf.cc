#include "grammar/ebnf.h"

#include <map>

#include "grammar/encoding.h"
#include "grammar/grammar_error.h"
#include "grammar/json_schema.h"
#include "grammar/raw_text.h"
#include "grammar/regex.h"

namespace deepinfer::grammar {

namespace {

class EbnfParser {
public:
    EbnfParser(std::string_view text, const JsonSchemaOptions& json_options, FormatCache* formats)
        : text_(text), json_options_(json_options), formats_(formats) {}

    Grammar run(const std::string& root_name) {
        skip_space();
        while (!at_end()) parse_rule();
        for (const auto& [name, use] : rules_)
            if (!use.defined) pos_ = use.first_use, fail("undefined rule '" + name + "'");
        auto root = rules_.find(root_name);
        if (root == rules_.end()) grammar_fail("EBNF grammar has no rule named '{}'", root_name);
        g_.set_root(root->second.id);
        return std::move(g_);
    }

private:
    struct RuleUse {
        int32_t id;
        bool defined;
        size_t first_use;
    };

    [[noreturn]] void fail(const std::string& why) const {
        size_t line = 1, col = 1;
        for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
            if (text_[i] == '\n') ++line, col = 1;
            else ++col;
        }
        grammar_fail("EBNF syntax error at {}:{}: {}", line, col, why);
    }
    bool at_end() const { return pos_ >= text_.size(); }
    char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
    void skip_space() {
        while (!at_end()) {
            char c = peek();
            if (c == '#') {
                while (!at_end() && peek() != '\n') ++pos_;
            } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                ++pos_;
            } else {
                break;
            }
        }
    }
    bool eat(std::string_view token) {
        if (text_.substr(pos_, token.size()) != token) return false;
        pos_ += token.size();
        skip_space();
        return true;
    }
    static bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
    static bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.'; }

    std::string read_name() {
        size_t start = pos_;
        while (!at_end() && name_char(peek())) ++pos_;
        return std::string(text_.substr(start, pos_ - start));
    }
    // Whether a rule definition `name ::=` starts here.
    bool at_rule_start() const {
        size_t p = pos_;
        if (!name_start(peek())) return false;
        while (p < text_.size() && name_char(text_[p])) ++p;
        while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t' || text_[p] == '\n' || text_[p] == '\r')) ++p;
        return text_.substr(p, 3) == "::=";
    }
    RuleUse& use_rule(const std::string& name, size_t at) {
        auto it = rules_.find(name);
        if (it == rules_.end()) it = rules_.emplace(name, RuleUse{g_.add_rule(name), false, at}).first;
        return it->second;
    }

    void parse_rule() {
        size_t at = pos_;
        if (!name_start(peek())) fail("expected a rule name");
        std::string name = read_name();
        skip_space();
        if (!eat("::=")) fail("expected '::=' after rule name '" + name + "'");
        RuleUse& rule = use_rule(name, at);
        if (rule.defined) pos_ = at, fail("rule '" + name + "' is defined twice");
        rule.defined = true;
        int32_t id = rule.id;
        g_.set_rule_body(id, parse_alternatives());
    }

    ExprId parse_alternatives() {
        std::vector<ExprId> alts{parse_sequence()};
        while (eat("|")) alts.push_back(parse_sequence());
        return g_.alt(alts);
    }

    ExprId parse_sequence() {
        std::vector<ExprId> items;
        while (!at_end() && peek() != '|' && peek() != ')' && !at_rule_start()) items.push_back(parse_quantified());
        return g_.seq(items);
    }

    ExprId parse_quantified() {
        ExprId item = parse_primary();
        if (eat("*")) return g_.star(item);
        if (eat("+")) return g_.plus(item);
        if (eat("?")) return g_.optional(item);
        if (peek() == '{') {
            ++pos_;
            int32_t min = read_count(), max = min;
            if (eat(",")) max = peek() == '}' ? Grammar::kUnbounded : read_count();
            if (!eat("}")) fail("expected '}' to close a repetition");
            if (max != Grammar::kUnbounded && max < min) fail("repetition bounds out of order");
            return g_.repeat(item, min, max);
        }
        return item;
    }

    int32_t read_count() {
        skip_space();
        if (!(peek() >= '0' && peek() <= '9')) fail("expected a number");
        int64_t v = 0;
        while (peek() >= '0' && peek() <= '9') v = std::min<int64_t>(v * 10 + (text_[pos_++] - '0'), 1 << 20);
        skip_space();
        return static_cast<int32_t>(v);
    }

    ExprId parse_primary();
    uint32_t read_escape();
    std::string read_string(char quote);
    ExprId parse_string(char quote) { return g_.literal(read_string(quote)); }
    ExprId parse_class();
    ExprId parse_regex_terminal();
    std::string_view scan_schema(const char* element);
    ExprId parse_json();
    ExprId parse_raw_text();

    std::string_view text_;
    const JsonSchemaOptions& json_options_;
    FormatCache* formats_;
    size_t pos_ = 0;
    Grammar g_;
    std::map<std::string, RuleUse> rules_;
    int32_t num_json_ = 0;
};

ExprId EbnfParser::parse_primary() {
    size_t at = pos_;
    char c = peek();
    ExprId e;
    if (name_start(c)) {
        std::string name = read_name();
        e = g_.rule_ref(use_rule(name, at).id);
    } else if (c == '"' || c == '\'') {
        ++pos_;
        e = parse_string(c);
    } else if (c == '[') {
        ++pos_;
        e = parse_class();
    } else if (c == '.') {
        ++pos_;
        e = utf8_class(g_, CodepointSet::all());
    } else if (c == '(') {
        ++pos_;
        skip_space();
        e = parse_alternatives();
        if (peek() != ')') fail("expected ')'");
        ++pos_;
    } else if (c == '/') {
        ++pos_;
        e = parse_regex_terminal();
    } else if (text_.substr(pos_, 5) == "%json") {
        pos_ += 5;
        skip_space();
        e = parse_json();
    } else if (text_.substr(pos_, 5) == "%text") {
        pos_ += 5;
        skip_space();
        e = parse_raw_text();
    } else {
        fail(at_end() ? "unexpected end of grammar" : std::string("unexpected character '") + c + "'");
    }
    skip_space();
    return e;
}

uint32_t EbnfParser::read_escape() {
    char c = peek();
    ++pos_;
    auto hex = [&](int n) {
        uint32_t v = 0;
        if (!read_hex(text_, pos_, n, v)) fail("bad hexadecimal escape");
        return v;
    };
    switch (c) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '0': return 0;
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case '\0': fail("unterminated escape");
        default: return static_cast<uint8_t>(c);
    }
}

std::string EbnfParser::read_string(char quote) {
    std::string bytes;
    while (peek() != quote) {
        if (at_end() || peek() == '\n') fail("unterminated string literal");
        if (peek() == '\\') {
            ++pos_;
            uint32_t c = read_escape();
            if (c > CodepointSet::kMax) fail("escape out of the Unicode range");
            append_utf8(bytes, c);
        } else {
            bytes.push_back(text_[pos_++]);
        }
    }
    ++pos_;
    size_t check = 0;
    uint32_t cp = 0;
    while (check < bytes.size())
        if (!decode_utf8(bytes, check, cp)) fail("string literal is not valid UTF-8");
    return bytes;
}

ExprId EbnfParser::parse_class() {
    bool negate = false;
    if (peek() == '^') negate = true, ++pos_;
    CodepointSet set;
    auto member = [&]() -> uint32_t {
        if (at_end()) fail("unterminated character class");
        if (peek() == '\\') {
            ++pos_;
            return read_escape();
        }
        uint32_t cp = 0;
        if (!decode_utf8(text_, pos_, cp)) fail("invalid UTF-8 in character class");
        return cp;
    };
    while (peek() != ']') {
        if (at_end()) fail("unterminated character class");
        uint32_t lo = member();
        if (peek() == '-' && peek(1) != ']') {
            ++pos_;
            uint32_t hi = member();
            if (hi < lo) fail("character range out of order");
            set.add_range(lo, hi);
        } else {
            set.add(lo);
        }
    }
    ++pos_;
    return utf8_class(g_, negate ? set.complement() : set);
}

ExprId EbnfParser::parse_regex_terminal() {
    std::string pattern;
    size_t start = pos_;
    while (peek() != '/') {
        if (at_end() || peek() == '\n') fail("unterminated /regex/");
        if (peek() == '\\' && peek(1) == '/') ++pos_;
        else if (peek() == '\\') pattern.push_back(text_[pos_++]);
        pattern.push_back(text_[pos_++]);
    }
    ++pos_;
    try {
        return lower_regex(g_, parse_regex(pattern), CharEncoding::kUtf8, RegexMatch::kWhole);
    } catch (const GrammarError& e) {
        pos_ = start;
        fail(e.what());
    }
}

// The schema runs to the brace that closes its opening one (strings and escapes respected).
std::string_view EbnfParser::scan_schema(const char* element) {
    if (peek() != '{') fail(std::string("expected '{' to start the ") + element + " schema");
    size_t start = pos_;
    int depth = 0;
    bool in_string = false;
    do {
        if (at_end()) pos_ = start, fail(std::string("unterminated ") + element + " schema");
        char c = text_[pos_++];
        if (in_string) {
            if (c == '\\') ++pos_;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{') {
            ++depth;
        } else if (c == '}') {
            --depth;
        }
    } while (depth > 0);
    return text_.substr(start, pos_ - start);
}

ExprId EbnfParser::parse_json() {
    size_t start = pos_;
    std::string_view schema = scan_schema("%json");
    std::string prefix = "json" + std::to_string(num_json_++) + ".";
    try {
        return add_json_schema(g_, schema, json_options_, prefix, formats_);
    } catch (const GrammarError& e) {
        pos_ = start;
        fail(std::string("in %json schema: ") + e.what());
    }
}

// %text{SCHEMA} until "TERMINATOR": raw text of a string the schema accepts, then the terminator.
ExprId EbnfParser::parse_raw_text() {
    size_t start = pos_;
    std::string_view schema = scan_schema("%text");
    skip_space();
    if (text_.substr(pos_, 5) != "until") fail("expected 'until \"terminator\"' after the %text schema");
    pos_ += 5;
    skip_space();
    char quote = peek();
    if (quote != '"' && quote != '\'') fail("expected the terminator string after 'until'");
    ++pos_;
    std::string terminator = read_string(quote);
    try {
        return add_raw_text(g_, schema, terminator);
    } catch (const GrammarError& e) {
        pos_ = start;
        fail(std::string("in %text schema: ") + e.what());
    }
}

}  // namespace

Grammar parse_ebnf(std::string_view text, const std::string& root_rule, const JsonSchemaOptions& json_options,
                   FormatCache* formats) {
    return EbnfParser(text, json_options, formats).run(root_rule);
}

}  // namespace deepinfer::grammar
