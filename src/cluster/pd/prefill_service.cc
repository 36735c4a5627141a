#include "cluster/pd/prefill_service.h"

#include <memory>
#include <mutex>

#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "cluster/pd/span_wire.h"
#include "deepinfer/prefix_spans.h"

namespace deepinfer::cluster {

namespace {

PrefillReply error_reply(int status, const std::string& message) {
    return {status, "application/json", nlohmann::json{{"error", {{"message", message}}}}.dump(), 0};
}

// Where a call's spans go over UCX: the peer's address and the transfer's id there.
struct UcxTarget {
    pd::UcxChannel* channel = nullptr;
    std::string peer;
    uint64_t transfer = 0;
};

// Gathers the spans of every prompt of one call (or sends them on over UCX as they come); replies
// when the last export ended and, over UCX, the last send completed. Spans of prompt p go to
// slot p, so the reply lists each prompt's spans in order, prompt after prompt.
class CallSpans : public std::enable_shared_from_this<CallSpans> {
public:
    CallSpans(size_t prompts, std::function<void(PrefillReply)> reply, UcxTarget ucx)
        : spans_(prompts), counts_(prompts, 0), pending_(prompts), reply_(std::move(reply)), ucx_(std::move(ucx)) {}

    void add(size_t prompt, std::vector<std::byte> blob) {
        std::unique_lock<std::mutex> lock(mutex_);
        int index = counts_[prompt]++;
        bytes_ += static_cast<int64_t>(blob.size());
        if (ucx_.channel == nullptr) return spans_[prompt].push_back(std::move(blob));
        ++pending_;
        lock.unlock();
        ucx_.channel->send(ucx_.peer, ucx_.transfer, static_cast<uint32_t>(prompt), static_cast<uint32_t>(index), std::move(blob),
                           [self = shared_from_this()](const std::string& error) { self->sent(error); });
    }
    void prompt_done() { finish_one(); }

private:
    void sent(const std::string& error) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!error.empty() && send_error_.empty()) send_error_ = error;
        }
        finish_one();
    }
    void finish_one() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (--pending_ > 0) return;
        }
        reply_(ucx_.channel ? ucx_reply() : body_reply());
    }
    PrefillReply body_reply() {
        std::vector<std::vector<std::byte>> all;
        for (auto& p : spans_)
            for (auto& s : p) all.push_back(std::move(s));
        PrefillReply r;
        r.spans = static_cast<int>(all.size());
        r.body = encode_spans(all);
        return r;
    }
    PrefillReply ucx_reply() {
        if (!send_error_.empty()) return error_reply(502, "sending the state over UCX failed: " + send_error_);
        PrefillReply r;
        r.content_type = "application/json";
        for (int c : counts_) r.spans += c;
        r.body = nlohmann::json{{"transport", "ucx"}, {"counts", counts_}, {"bytes", bytes_}}.dump();
        return r;
    }

    std::mutex mutex_;
    std::vector<std::vector<std::vector<std::byte>>> spans_;
    std::vector<int> counts_;
    int64_t pending_;  // prompts not done, plus UCX sends not completed
    int64_t bytes_ = 0;
    std::string send_error_;
    std::function<void(PrefillReply)> reply_;
    UcxTarget ucx_;
};

class PromptSink final : public PrefixSpanSink {
public:
    PromptSink(std::shared_ptr<CallSpans> call, size_t prompt) : call_(std::move(call)), prompt_(prompt) {}
    void on_span(int, std::vector<std::byte> blob) override { call_->add(prompt_, std::move(blob)); }
    void on_done(int) override { call_->prompt_done(); }

private:
    std::shared_ptr<CallSpans> call_;
    size_t prompt_;
};

std::vector<std::vector<int32_t>> parse_prompts(const nlohmann::json& j, int32_t vocab) {
    if (!j.is_object() || !j.contains("prompts") || !j["prompts"].is_array() || j["prompts"].empty())
        throw std::invalid_argument("expected {\"prompts\": [[token ids], ...]}");
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& p : j["prompts"]) {
        if (!p.is_array() || p.empty()) throw std::invalid_argument("each prompt must be a non-empty array of token ids");
        std::vector<int32_t>& ids = prompts.emplace_back();
        for (const auto& t : p) {
            if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
                throw std::invalid_argument("token ids must be integers in [0, " + std::to_string(vocab) + ")");
            ids.push_back(t.get<int32_t>());
        }
    }
    return prompts;
}

UcxTarget ucx_target(const nlohmann::json& j, pd::UcxChannel* channel) {
    if (!j.contains("ucx_address")) return {};
    if (!j["ucx_address"].is_string() || !j.contains("transfer") || !j["transfer"].is_number_unsigned())
        throw std::invalid_argument("ucx_address must be a string, with an unsigned transfer id");
    if (channel == nullptr) throw std::invalid_argument("this instance has no UCX transport: ask without ucx_address");
    return {channel, j["ucx_address"].get<std::string>(), j["transfer"].get<uint64_t>()};
}

}  // namespace

void run_prefill(Engine& engine, const std::string& body, std::function<void(PrefillReply)> reply, pd::UcxChannel* channel) {
    std::vector<std::vector<int32_t>> prompts;
    UcxTarget ucx;
    try {
        auto j = nlohmann::json::parse(body, nullptr, false);
        prompts = parse_prompts(j, engine.vocab_size());
        ucx = ucx_target(j, channel);
    } catch (const std::exception& e) {
        return reply(error_reply(400, e.what()));
    }
    auto call = std::make_shared<CallSpans>(prompts.size(), std::move(reply), std::move(ucx));
    for (size_t p = 0; p < prompts.size(); ++p) {
        GenerationRequest r;
        r.prompt_tokens = std::move(prompts[p]);
        r.sampling.temperature = 0.0f;
        r.sampling.max_tokens = 1;  // the prompt's state is what is wanted; its token is recomputed on the decode side
        r.sampling.ignore_eos = true;
        r.span_sink = std::make_shared<PromptSink>(call, p);
        // The export ends (on_done) whatever becomes of the request, so the stream is not awaited.
        engine.submit(std::move(r));
    }
}

}  // namespace deepinfer::cluster
