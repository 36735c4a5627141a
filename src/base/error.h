#pragma once
// Error reporting. deepinfer::Error is thrown for failures that abort the current operation (bad
// model files, bad arguments, broken invariants). API boundaries (the CLI, the server, the public
// engine API) catch it and turn it into an exit code, an HTTP error or a Status; nothing else
// swallows it.
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace deepinfer {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace deepinfer

// Throws deepinfer::Error with the formatted message when `cond` is false.
#define DI_CHECK(cond, ...)                  \
    do {                                     \
        if (!(cond)) ::deepinfer::fail(__VA_ARGS__); \
    } while (0)
