#include "base/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "base/error.h"

namespace deepinfer {

void set_log_level(const std::string& level) {
    auto parsed = spdlog::level::from_str(level);
    DI_CHECK(parsed != spdlog::level::off || level == "off", "unknown log level '{}'", level);
    static auto logger = [] {
        auto l = spdlog::stderr_color_mt("deepinfer");
        spdlog::set_default_logger(l);
        return l;
    }();
    logger->set_level(parsed);
}

}  // namespace deepinfer
