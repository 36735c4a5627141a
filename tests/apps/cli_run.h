#pragma once
// Runs the deepinfer binary of this build with arguments and captures its exit code and output.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace deepinfer::test {

struct RunResult {
    int exit_code;
    std::string output;  // stdout + stderr
};

inline RunResult run_deepinfer(const std::string& args) {
    std::string cmd = std::string(DEEPINFER_BINARY) + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace deepinfer::test
