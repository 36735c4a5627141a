#pragma once
// Compile errors of the grammar front-ends: an unsupported keyword, a bad regex at an offset, an
// EBNF syntax error at line:col, a grammar too large to compile. Thrown inside the compiler and
// returned to callers as a Status by GrammarCompiler.
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace deepinfer::grammar {

class GrammarError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void grammar_fail(fmt::format_string<Args...> format, Args&&... args) {
    throw GrammarError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace deepinfer::grammar
