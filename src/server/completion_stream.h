#pragma once
// Turns the engine's events for one completion call into OpenAI JSON: SSE chunks while
// streaming, one response at the end otherwise. Never waits: poll() applies whatever arrived, and
// the engine's listener says when to poll again. Tracks per-choice text, reasoning, tool calls
// (parsed as they stream) and logprobs. Not thread-safe: one caller at a time.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/engine.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/tool_call_stream.h"

namespace deepinfer::server {

class CompletionStream {
public:
    // Submits the call's requests to the engine.
    CompletionStream(Engine& engine, CompletionCall call, Metrics& metrics);
    ~CompletionStream();  // cancels what is still running

    // `listener` runs on the engine's thread whenever events arrive (see RequestStream).
    void set_listener(const std::function<void()>& listener);
    // Applies the events that arrived; returns the SSE text they make (streaming calls), ending
    // with "data: [DONE]" once everything finished.
    std::string poll();
    bool done() const { return done_; }
    bool streaming() const { return call_.stream; }
    // When the call arrived, if before this stream was made (a prefill fetched elsewhere first):
    // its time to first token counts from there, and `pd` says how it split.
    void set_arrival(std::chrono::steady_clock::time_point arrival, PdTiming pd = {}) {
        start_ = arrival;
        pd_ = pd;
    }
    // The non-streaming reply once done(): the response body, or the error to answer with.
    std::variant<nlohmann::json, ApiError> response();
    // Stops generation (client gone, or the server shuts down).
    void cancel();

private:
    struct Choice {
        std::string text, reasoning;
        std::unique_ptr<tokenizer::ReasoningStream> split;
        tokenizer::ToolCallStream tools;
        nlohmann::json tool_calls = nlohmann::json::array();
        std::vector<int32_t> tokens;
        nlohmann::json logprobs = nlohmann::json::array();
        double logprob_sum = 0;  // best_of ranks the choices by it
        size_t text_offset = 0;  // completions: bytes of text before the next chunk
        std::string finish;
        bool sent_first = false;
    };
    void apply(size_t s, const RequestEvent& ev, std::string* sse);
    void apply_completion(size_t ci, const SequenceEvent& se, const nlohmann::json& lp, const std::string& finish, std::string* sse);
    void apply_chat(size_t ci, const SequenceEvent& se, const nlohmann::json& lp, const std::string& finish, std::string* sse);
    nlohmann::json tool_call_deltas(Choice& c, const std::vector<tokenizer::ToolCallStream::CallDelta>& calls);
    nlohmann::json chunk(size_t choice, nlohmann::json delta_or_text, nlohmann::json logprobs, const std::string& finish);
    nlohmann::json logprob_entries(const SequenceEvent& se);
    nlohmann::json completions_logprobs(const nlohmann::json& entries, size_t text_offset) const;
    nlohmann::json usage() const;
    nlohmann::json final_choice(size_t i, size_t index);
    std::vector<size_t> returned_choices() const;
    std::string prompt_text(size_t choice) const;
    void finish_metrics();
    void observe_ttft(double ttft_s);

    Engine& engine_;
    CompletionCall call_;
    Metrics& metrics_;
    std::vector<std::shared_ptr<RequestStream>> streams_;
    std::vector<bool> stream_done_;
    std::vector<int> cached_tokens_;  // per request: prompt tokens its prefix-cache hit spared
    std::vector<Choice> choices_;
    std::string id_, error_;
    bool cancelled_ = false;
    int64_t created_ = 0;
    bool done_ = false;
    std::chrono::steady_clock::time_point start_, last_token_;
    bool any_token_ = false;
    bool queue_observed_ = false;
    double queue_s_ = -1;
    PdTiming pd_;
};

}  // namespace deepinfer::server
