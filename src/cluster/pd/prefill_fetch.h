#pragma once
// Prefill/decode disaggregation, decode side: asks a prefill instance for the state of a call's
// prompts (POST /internal/prefill, prefill_service.h) and measures the transfer. The caller
// imports the spans into its engine before submitting the call; on any failure it submits anyway
// and the engine computes the prompt itself (local prefill).
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cluster/http_client.h"

namespace deepinfer::cluster {

struct PrefillTransfer {
    std::vector<std::vector<std::byte>> spans;
    int64_t bytes = 0;  // on the wire
    std::chrono::steady_clock::time_point begin, end;
    std::string error;  // empty on success
    double seconds() const { return std::chrono::duration<double>(end - begin).count(); }
};

// `done` runs once, on an I/O thread of `io`.
void fetch_prefill(boost::asio::io_context& io, const HttpTarget& prefill, const std::vector<std::vector<int32_t>>& prompts,
                   double timeout_s, std::function<void(PrefillTransfer)> done);

}  // namespace deepinfer::cluster
