#pragma once
// Prompt state over UCX, both ends in one object per process. The decode side announces a
// transfer (expect()) and passes its worker address and the transfer's id to the prefill instance
// in the HTTP control call; the prefill side sends each span as its prefill produces it (send()),
// overlapping the transfer with the compute, and its HTTP reply says how many spans each prompt
// has; the decode side then collects them (collect()). HTTP stays the control plane and the
// fallback: any failure here makes the decode instance prefill locally.
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cluster/pd/ucx_transport.h"

namespace deepinfer::cluster::pd {

class UcxChannel {
public:
    UcxChannel();  // throws deepinfer::Error when UCX cannot start
    // This process's worker address, hex-encoded for the JSON control call.
    const std::string& address_hex() const { return address_hex_; }

    // Decode side: a new transfer of `prompts` prompts' spans; returns its id.
    uint64_t expect(size_t prompts);
    // Waits (at most `timeout`) until prompt p has counts[p] spans; returns them, prompt after
    // prompt, in order. Throws deepinfer::Error on a timeout or a count mismatch. Ends the transfer.
    std::vector<std::vector<std::byte>> collect(uint64_t id, const std::vector<int>& counts, std::chrono::milliseconds timeout);
    // Ends a transfer whose control call failed (late spans are then dropped).
    void forget(uint64_t id);

    // Prefill side: sends span `span` of prompt `prompt` of transfer `id` to the peer.
    void send(const std::string& peer_hex, uint64_t id, uint32_t prompt, uint32_t span, std::vector<std::byte> blob,
              UcxTransport::SendDone done);

private:
    void on_span(const SpanHeader& h, std::vector<std::byte> blob);

    struct Transfer {
        std::vector<std::map<uint32_t, std::vector<std::byte>>> prompts;  // span index -> blob
        int64_t arrived = 0;
    };
    std::mutex mutex_;
    std::condition_variable cv_;
    std::map<uint64_t, Transfer> transfers_;
    uint64_t next_id_ = 0;
    std::unique_ptr<UcxTransport> transport_;  // last: its thread calls on_span until it is gone
    std::string address_hex_;
};

}  // namespace deepinfer::cluster::pd
