#include "json_text.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace deepinfer::grammar::test {

namespace {

class Reader {
public:
    explicit Reader(std::string_view text) : t_(text) {}

    JsonText value() {
        space();
        JsonText v;
        char c = peek();
        if (c == '{') return object();
        if (c == '[') return array();
        if (c == '"') {
            v.kind = JsonText::Kind::kString;
            v.text = string();
        } else if (t_.substr(i_, 4) == "null") {
            i_ += 4;
        } else if (t_.substr(i_, 4) == "true") {
            v.kind = JsonText::Kind::kTrue, i_ += 4;
        } else if (t_.substr(i_, 5) == "false") {
            v.kind = JsonText::Kind::kFalse, i_ += 5;
        } else {
            size_t start = i_;
            while (i_ < t_.size() && std::string_view("+-0123456789.eE").find(t_[i_]) != std::string_view::npos) ++i_;
            if (start == i_) throw std::runtime_error("bad JSON at " + std::to_string(i_));
            v.kind = JsonText::Kind::kNumber;
            v.text = std::string(t_.substr(start, i_ - start));
        }
        return v;
    }
    void finish() {
        space();
        if (i_ != t_.size()) throw std::runtime_error("trailing characters in JSON");
    }

private:
    char peek() const { return i_ < t_.size() ? t_[i_] : '\0'; }
    void space() {
        while (i_ < t_.size() && std::string_view(" \t\r\n").find(t_[i_]) != std::string_view::npos) ++i_;
    }
    void expect(char c) {
        space();
        if (peek() != c) throw std::runtime_error(std::string("expected '") + c + "' in JSON at " + std::to_string(i_));
        ++i_;
    }
    static void utf8(std::string& out, uint32_t c) {
        if (c < 0x80) out += char(c);
        else if (c < 0x800) out += char(0xC0 | (c >> 6)), out += char(0x80 | (c & 0x3F));
        else if (c < 0x10000) out += char(0xE0 | (c >> 12)), out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
        else out += char(0xF0 | (c >> 18)), out += char(0x80 | ((c >> 12) & 0x3F)), out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
    }
    uint32_t hex4() {
        uint32_t v = std::stoul(std::string(t_.substr(i_, 4)), nullptr, 16);
        i_ += 4;
        return v;
    }
    std::string string() {
        expect('"');
        std::string out;
        while (peek() != '"') {
            if (i_ >= t_.size()) throw std::runtime_error("unterminated JSON string");
            char c = t_[i_++];
            if (c != '\\') {
                out += c;
                continue;
            }
            char e = t_[i_++];
            switch (e) {
                case 'n': out += '\n'; break;
                case 't': out += '\t'; break;
                case 'r': out += '\r'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'u': {
                    uint32_t c1 = hex4();
                    if (c1 >= 0xD800 && c1 <= 0xDBFF && t_.substr(i_, 2) == "\\u") {
                        i_ += 2;
                        uint32_t c2 = hex4();
                        c1 = 0x10000 + ((c1 - 0xD800) << 10) + (c2 - 0xDC00);
                    }
                    utf8(out, c1);
                    break;
                }
                default: out += e;
            }
        }
        ++i_;
        return out;
    }
    JsonText array() {
        JsonText v;
        v.kind = JsonText::Kind::kArray;
        expect('[');
        space();
        if (peek() == ']') return ++i_, v;
        for (;;) {
            v.items.push_back(value());
            space();
            if (peek() == ']') return ++i_, v;
            expect(',');
        }
    }
    JsonText object() {
        JsonText v;
        v.kind = JsonText::Kind::kObject;
        expect('{');
        space();
        if (peek() == '}') return ++i_, v;
        for (;;) {
            space();
            std::string key = string();
            expect(':');
            v.members.emplace_back(std::move(key), value());
            space();
            if (peek() == '}') return ++i_, v;
            expect(',');
        }
    }

    std::string_view t_;
    size_t i_ = 0;
};

void write_string(const std::string& s, std::string& out) {
    static const char* kHex = "0123456789abcdef";
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\r': out += "\\r"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) out += std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
                else out += static_cast<char>(c);
        }
    }
    out += '"';
}

void write(const JsonText& v, bool sort_keys, int indent, int depth, std::string& out) {
    auto newline = [&](int level) {
        if (indent > 0) out += "\n" + std::string(size_t(indent) * level, ' ');
    };
    switch (v.kind) {
        case JsonText::Kind::kNull: out += "null"; return;
        case JsonText::Kind::kTrue: out += "true"; return;
        case JsonText::Kind::kFalse: out += "false"; return;
        case JsonText::Kind::kNumber: out += v.text; return;
        case JsonText::Kind::kString: write_string(v.text, out); return;
        case JsonText::Kind::kArray:
            out += '[';
            for (size_t i = 0; i < v.items.size(); ++i) {
                if (i) out += indent > 0 ? ", " : ",";
                write(v.items[i], sort_keys, indent, depth + 1, out);
            }
            out += ']';
            return;
        case JsonText::Kind::kObject: {
            std::vector<const std::pair<std::string, JsonText>*> members;
            for (const auto& m : v.members) members.push_back(&m);
            if (sort_keys) std::stable_sort(members.begin(), members.end(), [](auto* a, auto* b) { return a->first < b->first; });
            out += '{';
            for (size_t i = 0; i < members.size(); ++i) {
                if (i) out += ',';
                newline(depth + 1);
                write_string(members[i]->first, out);
                out += indent > 0 ? ": " : ":";
                write(members[i]->second, sort_keys, indent, depth + 1, out);
            }
            if (!members.empty()) newline(depth);
            out += '}';
        }
    }
}

}  // namespace

JsonText parse_json_text(std::string_view text) {
    Reader r(text);
    JsonText v = r.value();
    r.finish();
    return v;
}

std::string write_json_text(const JsonText& value, bool sort_keys, int indent) {
    std::string out;
    write(value, sort_keys, indent, 0, out);
    return out;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace deepinfer::grammar::test
