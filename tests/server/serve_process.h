#pragma once
// Test helpers for the server as its users see it: a `deepinfer serve` process on a free loopback
// port (the binary is DEEPINFER_SERVE_BINARY when set, so the same tests can be pointed at another
// build), raw HTTP over sockets for what well-behaved clients never send, and SSE parsing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/process.h"

namespace deepinfer::test {

inline std::string serve_binary() {
    const char* other = std::getenv("DEEPINFER_SERVE_BINARY");
    return other && *other ? other : DEEPINFER_BINARY;
}

inline std::string nano_model_dir() { return std::string(DEEPINFER_SOURCE_DIR) + "/models/deepinfer-nano"; }

class ServeProcess {
public:
    // `args` after "serve"; `env` entries "NAME=value" added to the child's environment. Another
    // `command` ("router") starts that subcommand instead, on a free port as well.
    explicit ServeProcess(std::vector<std::string> args, std::vector<std::string> env = {}, std::string command = "serve") {
        int out[2];
        if (pipe(out) != 0) return;
        pid_ = fork();
        if (pid_ == 0) {
            dup2(out[1], STDOUT_FILENO);
            for (auto& e : env) putenv(e.data());
            std::vector<std::string> all = {serve_binary(), command, "--port", "0"};
            if (command == "serve") all.insert(all.end(), {"--threads", "2"});
            all.insert(all.end(), args.begin(), args.end());
            std::vector<char*> argv;
            for (auto& a : all) argv.push_back(a.data());
            argv.push_back(nullptr);
            execv(argv[0], argv.data());
            _exit(127);
        }
        close(out[1]);
        std::string banner;
        char ch;
        while (read(out[0], &ch, 1) == 1 && ch != '\n') banner += ch;
        close(out[0]);
        size_t colon = banner.rfind(':');
        if (colon != std::string::npos) port_ = std::atoi(banner.c_str() + colon + 1);
    }
    ~ServeProcess() {
        if (pid_ > 0 && !exited_) terminate(30);
    }
    int port() const { return port_; }
    pid_t pid() const { return pid_; }
    bool exited() const { return exited_; }

    // SIGTERM; waits up to `timeout_s` (then SIGKILL). Returns the wait status and the seconds
    // the process took to exit.
    std::pair<int, double> terminate(double timeout_s) {
        auto start = std::chrono::steady_clock::now();
        kill(pid_, SIGTERM);
        int status = 0;
        while (waitpid(pid_, &status, WNOHANG) == 0) {
            if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(timeout_s)) {
                kill(pid_, SIGKILL);
                waitpid(pid_, &status, 0);
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        exited_ = true;
        return {status, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
    }

    int64_t rss_kib() const { return resident_kib(pid_); }

private:
    pid_t pid_ = -1;
    int port_ = 0;
    bool exited_ = false;
};

// --- raw HTTP ----------------------------------------------------------------------------------

inline int connect_loopback(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

inline bool send_all(int fd, const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
        ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) return false;
        sent += static_cast<size_t>(n);
    }
    return true;
}

// Reads until the peer closes or `timeout_s` passes.
inline std::string read_until_close(int fd, double timeout_s) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    char buf[65536];
    for (;;) {
        int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
        if (left <= 0) break;
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, left) <= 0) break;
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
    }
    return out;
}

struct RawResponse {
    int status = 0;
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;                            // de-chunked
};

inline RawResponse parse_raw_response(const std::string& raw) {
    RawResponse r;
    size_t head_end = raw.find("\r\n\r\n");
    if (raw.size() < 12 || head_end == std::string::npos) return r;
    r.status = std::atoi(raw.c_str() + 9);
    size_t pos = raw.find("\r\n") + 2;
    while (pos < head_end) {
        size_t eol = raw.find("\r\n", pos), colon = raw.find(':', pos);
        std::string name = raw.substr(pos, colon - pos);
        for (auto& c : name) c = static_cast<char>(std::tolower(c));
        r.headers[name] = raw.substr(colon + 2, eol - colon - 2);
        pos = eol + 2;
    }
    std::string body = raw.substr(head_end + 4);
    if (r.headers["transfer-encoding"] != "chunked") {
        r.body = body;
        return r;
    }
    size_t p = 0;
    while (p < body.size()) {
        size_t eol = body.find("\r\n", p);
        if (eol == std::string::npos) break;
        size_t n = std::stoul(body.substr(p, eol - p), nullptr, 16);
        if (n == 0) break;
        r.body += body.substr(eol + 2, n);
        p = eol + 2 + n + 2;
    }
    return r;
}

// One request on a fresh connection that the request asks to close.
inline RawResponse raw_request(int port, const std::string& bytes, double timeout_s = 30) {
    int fd = connect_loopback(port);
    if (fd < 0) return {};
    send_all(fd, bytes);
    std::string raw = read_until_close(fd, timeout_s);
    close(fd);
    return parse_raw_response(raw);
}

inline std::string http_post(const std::string& path, const std::string& body, const std::string& extra_headers = "",
                             const std::string& version = "1.1") {
    return "POST " + path + " HTTP/" + version + "\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n" +
           extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

inline std::string http_get(const std::string& path, const std::string& extra_headers = "") {
    return "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + extra_headers + "\r\n";
}

// The JSON payloads of an SSE body ("[DONE]" excluded; `done` tells whether it came).
inline std::vector<nlohmann::json> sse_events(const std::string& body, bool* done = nullptr) {
    std::vector<nlohmann::json> out;
    size_t pos = 0;
    if (done) *done = false;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
        size_t end = body.find("\n\n", pos);
        std::string payload = body.substr(pos + 6, end - pos - 6);
        if (payload == "[DONE]") {
            if (done) *done = true;
        } else {
            out.push_back(nlohmann::json::parse(payload));
        }
        pos = end;
    }
    return out;
}

// A value from the Prometheus text (the first line starting with `series`), -1 when absent.
inline double metric_value(const std::string& text, const std::string& series) {
    size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::atof(text.c_str() + at + series.size() + 2);
}

}  // namespace deepinfer::test
