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

// Gathers the spans of every prompt of one call; replies when the last export ended. Spans of
// prompt p go to slot p, so the reply lists each prompt's spans in order, prompt after prompt.
class CallSpans {
public:
    CallSpans(size_t prompts, std::function<void(PrefillReply)> reply) : spans_(prompts), pending_(prompts), reply_(std::move(reply)) {}

    void add(size_t prompt, std::vector<std::byte> blob) {
        std::lock_guard<std::mutex> lock(mutex_);
        spans_[prompt].push_back(std::move(blob));
    }
    void prompt_done() {
        std::vector<std::vector<std::byte>> all;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (--pending_ > 0) return;
            for (auto& p : spans_)
                for (auto& s : p) all.push_back(std::move(s));
        }
        PrefillReply r;
        r.spans = static_cast<int>(all.size());
        r.body = encode_spans(all);
        reply_(std::move(r));
    }

private:
    std::mutex mutex_;
    std::vector<std::vector<std::vector<std::byte>>> spans_;
    size_t pending_;
    std::function<void(PrefillReply)> reply_;
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

std::vector<std::vector<int32_t>> parse_prompts(const std::string& body, int32_t vocab) {
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("prompts") || !j["prompts"].is_array() || j["prompts"].empty())
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

}  // namespace

void run_prefill(Engine& engine, const std::string& body, std::function<void(PrefillReply)> reply) {
    std::vector<std::vector<int32_t>> prompts;
    try {
        prompts = parse_prompts(body, engine.vocab_size());
    } catch (const std::exception& e) {
        return reply(error_reply(400, e.what()));
    }
    auto call = std::make_shared<CallSpans>(prompts.size(), std::move(reply));
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
