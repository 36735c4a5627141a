#pragma once
// A redis-server of the test's own on a free loopback port (no persistence), stopped with the
// object. Tests that need one skip when the binary is not installed (scripts/setup.sh installs it).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

extern char** environ;

namespace deepinfer::test {

inline std::string find_redis_server() {
    for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin"})
        if (std::filesystem::exists(std::string(dir) + "/redis-server")) return std::string(dir) + "/redis-server";
    return {};
}

// A port nothing listens on right now (the kernel picks it).
inline int free_loopback_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

inline bool port_accepts(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    return ok;
}

class RedisServer {
public:
    explicit RedisServer(int port = free_loopback_port()) : port_(port) { start(); }
    ~RedisServer() { stop(); }
    bool available() const { return !binary_.empty(); }
    int port() const { return port_; }
    std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

    void start() {
        binary_ = find_redis_server();
        if (binary_.empty() || pid_ > 0) return;
        std::string port = std::to_string(port_);
        const char* argv[] = {binary_.c_str(), "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru",
                              "--loglevel", "warning", nullptr};
        if (::posix_spawn(&pid_, binary_.c_str(), nullptr, nullptr, const_cast<char**>(argv), environ) != 0) pid_ = -1;
        for (int i = 0; i < 200 && pid_ > 0 && !port_accepts(port_); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    void stop() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGKILL);  // as a crash would: nothing is flushed
        ::waitpid(pid_, nullptr, 0);
        pid_ = -1;
    }

private:
    int port_;
    std::string binary_;
    pid_t pid_ = -1;
};

}  // namespace deepinfer::test
