#include "cluster/pd/ucx_channel.h"

#include "base/error.h"

namespace deepinfer::cluster::pd {

namespace {

std::string to_hex(const std::string& bytes) {
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned char c : bytes) out += {digits[c >> 4], digits[c & 15]};
    return out;
}

std::string from_hex(const std::string& hex) {
    DI_CHECK(hex.size() % 2 == 0, "a UCX address must be an even number of hex digits");
    auto digit = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        throw Error("a UCX address must be hex digits");
    };
    std::string out;
    for (size_t i = 0; i < hex.size(); i += 2) out += static_cast<char>(digit(hex[i]) * 16 + digit(hex[i + 1]));
    return out;
}

}  // namespace

UcxChannel::UcxChannel() {
    transport_ = std::make_unique<UcxTransport>([this](const SpanHeader& h, std::vector<std::byte> b) { on_span(h, std::move(b)); });
    address_hex_ = to_hex(transport_->address());
}

uint64_t UcxChannel::expect(size_t prompts) {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t id = ++next_id_;
    transfers_[id].prompts.resize(prompts);
    return id;
}

void UcxChannel::on_span(const SpanHeader& h, std::vector<std::byte> blob) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = transfers_.find(h.transfer);
    if (it == transfers_.end() || h.prompt >= it->second.prompts.size()) return;  // late, or not ours
    if (it->second.prompts[h.prompt].emplace(h.span, std::move(blob)).second) ++it->second.arrived;
    cv_.notify_all();
}

std::vector<std::vector<std::byte>> UcxChannel::collect(uint64_t id, const std::vector<int>& counts, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto it = transfers_.find(id);
    DI_CHECK(it != transfers_.end(), "UCX transfer {} is unknown", id);
    Transfer& t = it->second;
    int64_t expected = 0;
    for (int c : counts) expected += c;
    bool shaped = counts.size() == t.prompts.size();
    bool complete = shaped && cv_.wait_for(lock, timeout, [&] { return t.arrived >= expected; });
    std::vector<std::vector<std::byte>> spans;
    for (size_t p = 0; complete && p < t.prompts.size(); ++p)
        for (int s = 0; s < counts[p]; ++s) {
            auto found = t.prompts[p].find(static_cast<uint32_t>(s));
            if (found == t.prompts[p].end()) complete = false;
            else spans.push_back(std::move(found->second));
        }
    int64_t arrived = t.arrived;
    transfers_.erase(it);
    DI_CHECK(complete, "UCX transfer {}: {} of {} spans arrived", id, arrived, expected);
    return spans;
}

void UcxChannel::forget(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    transfers_.erase(id);
}

void UcxChannel::send(const std::string& peer_hex, uint64_t id, uint32_t prompt, uint32_t span, std::vector<std::byte> blob,
                      UcxTransport::SendDone done) {
    std::string peer;
    try {
        peer = from_hex(peer_hex);
    } catch (const std::exception& e) {
        return done(e.what());
    }
    transport_->send(peer, {id, prompt, span}, std::make_shared<const std::vector<std::byte>>(std::move(blob)), std::move(done));
}

}  // namespace deepinfer::cluster::pd
