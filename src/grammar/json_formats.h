#pragma once
// String formats of JSON Schema enforced as grammars: date-time, date, time (RFC 3339, with real
// month lengths, leap years and leap seconds), email (RFC 5321 mailbox: dot-atom or quoted local
// part, hostname or address-literal domain), uri (RFC 3986), uuid, ipv4, ipv6. Format strings are
// generated without optional escapes (a date never contains "\u0031").
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "grammar/dfa.h"
#include "grammar/grammar_ir.h"

namespace deepinfer::grammar {

// The string content (between the quotes) for `format`, or nullopt for a format not enforced.
std::optional<ExprId> format_grammar(Grammar& g, std::string_view format);

// Whether `format` is one of the formats JSON Schema 2020-12 defines.
bool is_standard_format(std::string_view format);

// Format automata (string content) compiled once and shared by the compiles of one
// GrammarCompiler: date-time with exact leap seconds alone has tens of thousands of states.
// Thread-safe.
class FormatCache {
public:
    // nullptr for a format not enforced.
    std::shared_ptr<const Dfa> get(const std::string& format);

private:
    std::mutex mutex_;
    std::map<std::string, std::shared_ptr<const Dfa>> dfas_;
};

}  // namespace deepinfer::grammar
