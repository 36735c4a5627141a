#include "cluster/pd/prefill_fetch.h"

#include <nlohmann/json.hpp>

#include "cluster/pd/span_wire.h"

namespace deepinfer::cluster {

void fetch_prefill(boost::asio::io_context& io, const HttpTarget& prefill, const std::vector<std::vector<int32_t>>& prompts,
                   double timeout_s, std::function<void(PrefillTransfer)> done) {
    HttpClientRequest req;
    req.method = "POST";
    req.path = "/internal/prefill";
    req.body = nlohmann::json{{"prompts", prompts}}.dump();
    req.connect_timeout_s = std::min(timeout_s, 5.0);
    req.idle_timeout_s = timeout_s;
    auto begin = std::chrono::steady_clock::now();
    http_fetch(io, prefill, std::move(req), [begin, done = std::move(done)](int status, std::string body, std::string error) {
        PrefillTransfer t;
        t.begin = begin;
        t.end = std::chrono::steady_clock::now();
        t.bytes = static_cast<int64_t>(body.size());
        if (error.empty() && status != 200) error = "status " + std::to_string(status) + ": " + body.substr(0, 200);
        if (error.empty()) {
            try {
                t.spans = decode_spans(body);
            } catch (const std::exception& e) {
                error = e.what();
            }
        }
        t.error = std::move(error);
        done(std::move(t));
    });
}

}  // namespace deepinfer::cluster
