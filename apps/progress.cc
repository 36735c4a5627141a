#include "apps/progress.h"

#include <unistd.h>

#include <cstdio>

namespace deepinfer::apps {

ProgressBar::ProgressBar(int64_t total, std::string what)
    : total_(total), what_(std::move(what)), tty_(::isatty(STDERR_FILENO) != 0), start_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(int64_t done, int64_t tokens) {
    auto now = std::chrono::steady_clock::now();
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(tty_ ? 100 : 2000)) return;
    last_draw_ = now;
    double secs = std::chrono::duration<double>(now - start_).count();
    int width = 30, filled = total_ > 0 ? static_cast<int>(width * done / total_) : width;
    std::string bar(filled, '=');
    if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
    std::fprintf(stderr, "%s[%s] %ld/%ld %s, %.1f tok/s, %.0fs%s", tty_ ? "\r" : "", bar.c_str(), static_cast<long>(done),
                 static_cast<long>(total_), what_.c_str(), secs > 0 ? tokens / secs : 0.0, secs, tty_ ? "" : "\n");
    std::fflush(stderr);
}

void ProgressBar::finish() {
    if (tty_) std::fprintf(stderr, "\n");
}

}  // namespace deepinfer::apps
