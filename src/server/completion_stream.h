#pragma once
// Turns the engine's events for one completion call into OpenAI JSON: SSE chunks while
// streaming, one response at the end otherwise. Tracks per-choice text, reasoning and logprobs.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/engine.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "tokenizer/chat_encoding.h"

namespace deepinfer::server {

class CompletionStream {
public:
    CompletionStream(Engine& engine, CompletionCall call, Metrics& metrics);
    ~CompletionStream();

    // Next SSE payloads ("data: {...}\n\n" each); empty when nothing arrived within `wait`.
    // Sets done() after the final chunks ([DONE] included).
    std::string next_sse(std::chrono::milliseconds wait);
    bool done() const { return done_; }
    // Waits for everything and returns the non-streaming response body.
    nlohmann::json collect();
    // Stops generation (client gone).
    void cancel();
    // Set when the engine reported an error for the call.
    const std::string& error() const { return error_; }

private:
    struct Choice {
        std::string text, reasoning;
        std::unique_ptr<tokenizer::ReasoningStream> split;
        std::vector<int32_t> tokens;
        nlohmann::json logprobs = nlohmann::json::array();
        std::string finish;
        bool sent_role = false;
    };
    // Applies one event of stream `s`; appends SSE chunks to `sse` when streaming.
    void apply(size_t s, const RequestEvent& ev, std::string* sse);
    nlohmann::json chunk(size_t choice, nlohmann::json delta_or_text, const nlohmann::json& logprobs, const std::string& finish);
    nlohmann::json logprob_entries(const SequenceEvent& se);
    nlohmann::json usage() const;
    nlohmann::json final_choice(size_t i);

    Engine& engine_;
    CompletionCall call_;
    Metrics& metrics_;
    std::vector<std::shared_ptr<RequestStream>> streams_;
    std::vector<bool> stream_done_;
    std::vector<Choice> choices_;
    std::string id_, error_;
    int64_t created_ = 0;
    bool done_ = false;
    std::chrono::steady_clock::time_point start_, last_token_;
    bool any_token_ = false;
};

}  // namespace deepinfer::server
