// The data plane of prefill/decode disaggregation next to the raw bandwidth of the memory it moves
// through: a single-threaded memcpy of host memory, and UcxTransport (cluster/pd) between two
// processes on this host, as a prefill and a decode instance use it (one blob per span, each copied
// out of UCX's buffer on arrival), and without peer-failure detection, which lets UCX pick shared
// memory. Prints one JSON line.
//   bench_pd_transfer --sizes-mib 1,8,64 --total-mib 1024
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cluster/pd/ucx_transport.h"

namespace {

using Clock = std::chrono::steady_clock;
using deepinfer::cluster::pd::SpanHeader;
using deepinfer::cluster::pd::UcxTransport;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Best of five copies of a buffer far larger than the caches.
double host_memcpy_gbps(size_t bytes) {
    std::vector<char> a(bytes, 1), b(bytes, 2);
    double best = 1e30;
    for (int i = 0; i < 5; ++i) {
        auto t = Clock::now();
        std::memcpy(b.data(), a.data(), bytes);
        best = std::min(best, seconds_since(t));
        a[static_cast<size_t>(i)] = b[bytes - 1 - static_cast<size_t>(i)];  // keeps the copies observable
    }
    return static_cast<double>(bytes) / best / 1e9;
}

bool write_all(int fd, const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
        ssize_t w = ::write(fd, c, n);
        if (w <= 0) return false;
        c += w, n -= static_cast<size_t>(w);
    }
    return true;
}

bool read_all(int fd, void* p, size_t n) {
    char* c = static_cast<char*>(p);
    while (n > 0) {
        ssize_t r = ::read(fd, c, n);
        if (r <= 0) return false;
        c += r, n -= static_cast<size_t>(r);
    }
    return true;
}

// The decode side: sends its address up `to_parent`, then one byte per `counts[i]` spans received.
[[noreturn]] void run_receiver(int to_parent, int from_parent, const std::vector<int>& counts) {
    int received = 0;  // the callbacks run on the transport's one thread
    size_t round = 0;
    int due = counts.empty() ? 0 : counts[0];
    UcxTransport receiver([&](const SpanHeader&, std::vector<std::byte> blob) {
        if (blob.empty() || ++received < due) return;
        received = 0;
        char ack = 1;
        write_all(to_parent, &ack, 1);
        due = ++round < counts.size() ? counts[round] : 0;
    });
    uint32_t n = static_cast<uint32_t>(receiver.address().size());
    write_all(to_parent, &n, sizeof n);
    write_all(to_parent, receiver.address().data(), n);
    char eof;
    while (::read(from_parent, &eof, 1) > 0) {
    }
    std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"UCX span transfer between two processes vs host memcpy"};
    std::vector<double> sizes_mib = {1, 8, 64};
    double total_mib = 1024;
    bool no_peer_failure = false;
    app.add_option("--sizes-mib", sizes_mib, "span sizes")->delimiter(',');
    app.add_option("--total-mib", total_mib, "bytes sent per size");
    app.add_flag("--no-peer-failure", no_peer_failure,
                 "endpoints without peer-failure detection, as serve never uses them (lets UCX pick shared memory)");
    CLI11_PARSE(app, argc, argv);

    std::vector<size_t> sizes;
    std::vector<int> counts;
    for (double s : sizes_mib) {
        sizes.push_back(static_cast<size_t>(s * (1 << 20)));
        counts.push_back(std::max(2, static_cast<int>(total_mib / s)));
    }
    nlohmann::json out = {{"host_memcpy_GBps", host_memcpy_gbps(size_t{1} << 30)}, {"peer_failure_detection", !no_peer_failure}};

    int up[2], down[2];
    if (::pipe(up) != 0 || ::pipe(down) != 0) return 1;
    pid_t child = ::fork();
    if (child == 0) {
        ::close(up[0]), ::close(down[1]);
        run_receiver(up[1], down[0], counts);
    }
    ::close(up[1]), ::close(down[0]);
    uint32_t n = 0;
    std::string address;
    if (read_all(up[0], &n, sizeof n)) {
        address.resize(n);
        read_all(up[0], address.data(), n);
    }
    if (address.empty()) {
        std::cerr << "the receiving process did not start UCX\n";
        return 1;
    }
    UcxTransport sender([](const SpanHeader&, std::vector<std::byte>) {}, {.detect_peer_failure = !no_peer_failure});
    for (size_t i = 0; i < sizes.size(); ++i) {
        auto blob = std::make_shared<const std::vector<std::byte>>(sizes[i], std::byte{7});
        std::atomic<int> failed{0};
        auto t = Clock::now();
        for (int k = 0; k < counts[i]; ++k)
            sender.send(address, {1, 0, static_cast<uint32_t>(k)}, blob, [&](const std::string& e) { failed += !e.empty(); });
        char ack = 0;
        bool ok = read_all(up[0], &ack, 1) && failed == 0;
        double s = seconds_since(t);
        double bytes = static_cast<double>(sizes[i]) * counts[i];
        out["ucx"].push_back({{"span_bytes", sizes[i]}, {"spans", counts[i]}, {"ok", ok}, {"seconds", s}, {"GBps", bytes / s / 1e9}});
    }
    ::close(down[1]);
    int status = 0;
    ::waitpid(child, &status, 0);
    std::cout << out.dump() << "\n";
    return 0;
}
