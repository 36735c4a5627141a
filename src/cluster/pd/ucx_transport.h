#pragma once
// The data plane of prefill/decode disaggregation: one UCX context and worker per process,
// driven by a thread of its own. Spans travel as UCX active messages (a small header naming the
// transfer, then the blob; UCX picks eager or rendezvous by size and the transport by what the
// peers share: shared memory or CMA on one host, TCP between hosts, and device-memory transports
// where the UCX build has them). Peers are found by their worker address, which the control
// handshake carries over HTTP. Thread-safe: any thread may send; receive callbacks run on the
// transport's thread and must only hand the data on.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace deepinfer::cluster::pd {

// What identifies a span on the wire.
struct SpanHeader {
    uint64_t transfer = 0;  // chosen by the receiver, unique among its transfers in flight
    uint32_t prompt = 0;    // which prompt of the request
    uint32_t span = 0;      // which span of the prompt (0 first)
};

class UcxTransport {
public:
    // `error` is empty when the message left (its buffer is free); else why it failed.
    using SendDone = std::function<void(const std::string& error)>;
    using OnSpan = std::function<void(const SpanHeader& header, std::vector<std::byte> blob)>;

    // With `detect_peer_failure` a peer that dies fails the sends to it instead of hanging them;
    // UCX 1.13's shared-memory transports cannot detect that, so such endpoints go over TCP (or
    // a device transport). Without it (benchmarks) UCX may pick shared memory.
    struct Options {
        bool detect_peer_failure = true;
    };
    // Starts UCX and its thread; throws deepinfer::Error when UCX cannot start.
    explicit UcxTransport(OnSpan on_span, Options options);
    explicit UcxTransport(OnSpan on_span) : UcxTransport(std::move(on_span), Options{}) {}
    ~UcxTransport();
    UcxTransport(const UcxTransport&) = delete;
    UcxTransport& operator=(const UcxTransport&) = delete;

    // This worker's address (binary), for peers to send to.
    const std::string& address() const { return address_; }
    // Queues `blob` to the peer at `peer_address`; `done` runs on the transport's thread.
    void send(const std::string& peer_address, SpanHeader header, std::shared_ptr<const std::vector<std::byte>> blob,
              SendDone done);
    struct Impl;

private:
    void loop();

    std::unique_ptr<Impl> impl_;
    std::string address_;
    std::thread thread_;
};

}  // namespace deepinfer::cluster::pd
