#pragma once
// Logging goes through spdlog's default logger to stderr (stdout stays free for program output).
// set_log_level() is called once by the app from its config; library code only logs.
#include <spdlog/spdlog.h>

#include <string>

namespace deepinfer {

// Accepts "trace", "debug", "info", "warn", "error", "off"; throws deepinfer::Error otherwise.
void set_log_level(const std::string& level);

}  // namespace deepinfer
