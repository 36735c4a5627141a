#pragma once
// A one-line progress bar on stderr for batch jobs (redrawn in place; plain lines when stderr is
// not a terminal).
#include <chrono>
#include <cstdint>
#include <string>

namespace deepinfer::apps {

class ProgressBar {
public:
    ProgressBar(int64_t total, std::string what);
    void update(int64_t done, int64_t tokens);
    void finish();

private:
    int64_t total_;
    std::string what_;
    bool tty_;
    std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace deepinfer::apps
