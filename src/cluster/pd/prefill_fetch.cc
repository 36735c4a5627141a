#include "cluster/pd/prefill_fetch.h"

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "cluster/pd/span_wire.h"

namespace deepinfer::cluster {

namespace {

// The reply of a call whose spans came over UCX: how many per prompt.
void read_ucx_reply(PrefillTransfer& t, const std::string& body, size_t prompts) {
    auto j = nlohmann::json::parse(body, nullptr, false);
    bool ok = j.is_object() && j.value("transport", "") == "ucx" && j.contains("counts") && j["counts"].is_array() &&
              j["counts"].size() == prompts;
    if (ok)
        for (const auto& c : j["counts"]) ok = ok && c.is_number_unsigned();
    if (!ok) {
        t.error = "a malformed UCX reply: " + body.substr(0, 200);
        return;
    }
    t.ucx_counts = j["counts"].get<std::vector<int>>();
}

}  // namespace

void fetch_prefill(boost::asio::io_context& io, const HttpTarget& prefill, const std::vector<std::vector<int32_t>>& prompts,
                   double timeout_s, pd::UcxChannel* channel, std::function<void(PrefillTransfer)> done) {
    HttpClientRequest req;
    req.method = "POST";
    req.path = "/internal/prefill";
    nlohmann::json body = {{"prompts", prompts}};
    uint64_t transfer = 0;
    if (channel != nullptr) {
        transfer = channel->expect(prompts.size());
        body["ucx_address"] = channel->address_hex();
        body["transfer"] = transfer;
    }
    req.body = body.dump();
    req.connect_timeout_s = std::min(timeout_s, 5.0);
    req.idle_timeout_s = timeout_s;
    auto begin = std::chrono::steady_clock::now();
    size_t count = prompts.size();
    http_fetch(io, prefill, std::move(req),
               [begin, count, transfer, channel, done = std::move(done)](int status, std::string reply, std::string error, Headers headers) {
                   PrefillTransfer t;
                   t.begin = begin;
                   t.end = std::chrono::steady_clock::now();
                   t.ucx_transfer = transfer;
                   t.transport = channel != nullptr ? "ucx" : "http";
                   for (const auto& [name, value] : headers)
                       if (name == "X-DeepInfer-Prefill-Seconds") t.prefill_seconds = std::strtod(value.c_str(), nullptr);
                   if (error.empty() && status != 200) error = "status " + std::to_string(status) + ": " + reply.substr(0, 200);
                   t.error = std::move(error);
                   if (t.error.empty() && channel != nullptr) {
                       read_ucx_reply(t, reply, count);
                   } else if (t.error.empty()) {
                       t.bytes = static_cast<int64_t>(reply.size());
                       try {
                           t.spans = decode_spans(reply);
                       } catch (const std::exception& e) {
                           t.error = e.what();
                       }
                   }
                   if (!t.error.empty() && channel != nullptr) channel->forget(transfer);
                   done(std::move(t));
               });
}

void collect_ucx(PrefillTransfer& t, pd::UcxChannel& channel, std::chrono::milliseconds timeout) {
    try {
        t.spans = channel.collect(t.ucx_transfer, t.ucx_counts, timeout);
    } catch (const std::exception& e) {
        t.error = e.what();
    }
    t.end = std::chrono::steady_clock::now();
    for (const auto& s : t.spans) t.bytes += static_cast<int64_t>(s.size());
}

}  // namespace deepinfer::cluster
