#pragma once
// Prefill/decode disaggregation, decode side: asks a prefill instance for the state of a call's
// prompts (POST /internal/prefill, prefill_service.h) and measures the transfer. With a UCX
// channel the spans come over UCX while the prefill runs and the HTTP reply only counts them;
// without one they come in the reply's body. The caller imports the spans into its engine before
// submitting the call; on any failure it submits anyway and the engine computes the prompt itself
// (local prefill).
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cluster/http_client.h"
#include "cluster/pd/ucx_channel.h"

namespace deepinfer::cluster {

struct PrefillTransfer {
    std::vector<std::vector<std::byte>> spans;
    int64_t bytes = 0;  // of state received
    std::chrono::steady_clock::time_point begin, end;
    std::string transport = "http";
    double prefill_seconds = 0;  // of `seconds()`, what the prefill instance took (its prefill and sends)
    std::string error;  // empty on success
    // UCX: the transfer's id on this side, and the spans per prompt the prefill instance sent.
    uint64_t ucx_transfer = 0;
    std::vector<int> ucx_counts;
    double seconds() const { return std::chrono::duration<double>(end - begin).count(); }
};

// `done` runs once, on an I/O thread of `io` (which must not wait for UCX: see collect_ucx).
void fetch_prefill(boost::asio::io_context& io, const HttpTarget& prefill, const std::vector<std::vector<int32_t>>& prompts,
                   double timeout_s, pd::UcxChannel* channel, std::function<void(PrefillTransfer)> done);
// For a UCX transfer whose control call succeeded: waits (at most `timeout`) for its spans and
// moves them into `t` (or sets t.error). Blocks: call it off the I/O threads.
void collect_ucx(PrefillTransfer& t, pd::UcxChannel& channel, std::chrono::milliseconds timeout);

}  // namespace deepinfer::cluster
