#include "server/completion_stream.h"

#include <atomic>
#include <thread>

namespace deepinfer::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string sse(const json& j) { return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n"; }

std::string finish_name(FinishReason r) {
    switch (r) {
        case FinishReason::kStop: return "stop";
        case FinishReason::kLength: return "length";
        case FinishReason::kCancelled: return "abort";
        default: return "error";
    }
}

json bytes_of(const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(c);
    return b;
}

std::string next_call_id() {
    static std::atomic<uint64_t> counter{0};  // process-wide unique ids for tool calls
    return "call_" + std::to_string(++counter);
}

}  // namespace

CompletionStream::CompletionStream(Engine& engine, CompletionCall call, Metrics& metrics)
    : engine_(engine), call_(std::move(call)), metrics_(metrics), start_(Clock::now()) {
    static std::atomic<uint64_t> counter{0};
    id_ = (call_.chat ? "chatcmpl-" : "cmpl-") + std::to_string(++counter);
    created_ = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    int n = call_.requests.empty() ? 1 : call_.requests[0].sampling.n;
    choices_.resize(call_.requests.size() * n);
    for (auto& c : choices_)
        if (call_.chat) c.split = std::make_unique<tokenizer::ReasoningStream>(call_.thinking);
    for (auto& r : call_.requests) {
        streams_.push_back(engine_.submit(r));
        stream_done_.push_back(false);
    }
    metrics_.active_requests++;
}

CompletionStream::~CompletionStream() {
    cancel();
    metrics_.active_requests--;
}

void CompletionStream::cancel() {
    for (size_t i = 0; i < streams_.size(); ++i)
        if (!stream_done_[i]) streams_[i]->cancel();
}

json CompletionStream::logprob_entries(const SequenceEvent& se) {
    json out = json::array();
    for (size_t t = 0; t < se.logprobs.size(); ++t) {
        std::string tok = engine_.detokenize({se.logprobs[t].token});
        json e = {{"token", tok}, {"logprob", se.logprobs[t].logprob}, {"bytes", bytes_of(tok)}, {"top_logprobs", json::array()}};
        if (t < se.top_logprobs.size())
            for (const auto& alt : se.top_logprobs[t]) {
                std::string a = engine_.detokenize({alt.token});
                e["top_logprobs"].push_back({{"token", a}, {"logprob", alt.logprob}, {"bytes", bytes_of(a)}});
            }
        out.push_back(std::move(e));
    }
    return out;
}

// OpenAI's legacy completions logprobs layout from chat-style entries.
static json completions_logprobs(const json& entries, size_t text_offset) {
    json lp = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
    for (const auto& e : entries) {
        lp["tokens"].push_back(e["token"]);
        lp["token_logprobs"].push_back(e["logprob"]);
        json top = json::object();
        for (const auto& a : e["top_logprobs"]) top[a["token"].get<std::string>()] = a["logprob"];
        lp["top_logprobs"].push_back(top);
        lp["text_offset"].push_back(text_offset);
        text_offset += e["token"].get<std::string>().size();
    }
    return lp;
}

json CompletionStream::chunk(size_t choice, json delta_or_text, const json& logprobs, const std::string& finish) {
    json c = {{"index", choice}, {"finish_reason", finish.empty() ? json() : json(finish)}};
    c[call_.chat ? "delta" : "text"] = std::move(delta_or_text);
    c["logprobs"] = logprobs.empty() ? json() : (call_.chat ? json{{"content", logprobs}} : completions_logprobs(logprobs, 0));
    return {{"id", id_}, {"object", call_.chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
            {"model", call_.model}, {"choices", json::array({c})}};
}

void CompletionStream::apply(size_t s, const RequestEvent& ev, std::string* out) {
    int n = call_.requests[s].sampling.n;
    if (!ev.error.empty()) error_ = ev.error;
    for (const auto& se : ev.sequences) {
        size_t ci = s * n + se.index;
        Choice& c = choices_[ci];
        if (!se.tokens.empty()) {
            auto now = Clock::now();
            if (!any_token_) metrics_.ttft.observe(std::chrono::duration<double>(now - start_).count());
            else metrics_.itl.observe(std::chrono::duration<double>(now - last_token_).count() / se.tokens.size());
            any_token_ = true;
            last_token_ = now;
        }
        c.tokens.insert(c.tokens.end(), se.tokens.begin(), se.tokens.end());
        json lp = se.logprobs.empty() ? json::array() : logprob_entries(se);
        for (auto& e : lp) c.logprobs.push_back(e);
        std::string finish = se.finish == FinishReason::kNone ? "" : finish_name(se.finish);
        if (!call_.chat) {
            c.text += se.text;
            if (!finish.empty()) c.finish = finish;
            if (out && (!se.text.empty() || !finish.empty() || !lp.empty())) *out += sse(chunk(ci, se.text, lp, finish));
            continue;
        }
        tokenizer::ReasoningStream::Delta d = c.split->push(se.text);
        if (!finish.empty()) {
            auto rest = c.split->flush();
            d.reasoning += rest.reasoning;
            d.content += rest.content;
        }
        c.reasoning += d.reasoning;
        c.text += d.content;
        json delta = json::object();
        if (!c.sent_role) delta["role"] = "assistant", c.sent_role = true;
        if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
        if (!d.content.empty() && !call_.has_tools) delta["content"] = d.content;  // with tools: sent once parsed
        if (!finish.empty()) {
            c.finish = finish;
            if (call_.has_tools) {
                json msg = final_choice(ci)["message"];
                if (!msg["content"].get<std::string>().empty()) delta["content"] = msg["content"];
                if (msg.contains("tool_calls")) {
                    json calls = msg["tool_calls"];
                    for (size_t k = 0; k < calls.size(); ++k) calls[k]["index"] = k;
                    delta["tool_calls"] = calls;
                    c.finish = finish = "tool_calls";
                }
            }
        }
        if (out && (delta.size() > (delta.contains("role") ? 1u : 0u) || !finish.empty() || !lp.empty() || delta.contains("role")))
            *out += sse(chunk(ci, delta, lp, finish));
    }
    if (ev.finished) stream_done_[s] = true;
}

json CompletionStream::usage() const {
    int prompt = 0, completion = 0;
    for (size_t i = 0; i < call_.requests.size(); ++i) prompt += static_cast<int>(call_.requests[i].prompt_tokens.size());
    for (const auto& c : choices_) completion += static_cast<int>(c.tokens.size());
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

json CompletionStream::final_choice(size_t i) {
    Choice& c = choices_[i];
    json out = {{"index", i}, {"finish_reason", c.finish.empty() ? json() : json(c.finish)}};
    if (!call_.chat) {
        std::string prefix = call_.echo ? engine_.detokenize(call_.requests[i / call_.requests[0].sampling.n].prompt_tokens) : "";
        out["text"] = prefix + c.text;
        out["logprobs"] = call_.top_logprobs >= 0 ? completions_logprobs(c.logprobs, prefix.size()) : json();
        return out;
    }
    json msg = {{"role", "assistant"}, {"content", c.text}};
    if (call_.thinking) msg["reasoning_content"] = c.reasoning;
    if (call_.has_tools) {
        tokenizer::ParsedCompletion parsed = tokenizer::parse_completion(c.text, false);
        if (!parsed.tool_calls.empty()) {
            msg["content"] = parsed.content;
            msg["tool_calls"] = json::array();
            for (auto& tc : parsed.tool_calls)
                msg["tool_calls"].push_back({{"id", next_call_id()}, {"type", "function"},
                                             {"function", {{"name", tc.name}, {"arguments", tc.arguments}}}});
            out["finish_reason"] = "tool_calls";
        }
    }
    out["message"] = msg;
    out["logprobs"] = call_.top_logprobs >= 0 ? json{{"content", c.logprobs}} : json();
    return out;
}

std::string CompletionStream::next_sse(std::chrono::milliseconds wait) {
    std::string out;
    auto deadline = Clock::now() + wait;
    do {
        for (size_t s = 0; s < streams_.size(); ++s) {
            if (stream_done_[s]) continue;
            auto per_stream = streams_.size() == 1 ? wait : std::chrono::milliseconds(1);
            while (auto ev = streams_[s]->next_for(out.empty() ? per_stream : std::chrono::milliseconds(0))) {
                if (ev->sequences.empty() && !ev->finished && ev->error.empty()) break;  // timed out
                apply(s, *ev, &out);
                if (stream_done_[s]) break;
            }
        }
    } while (out.empty() && Clock::now() < deadline && !std::all_of(stream_done_.begin(), stream_done_.end(), [](bool b) { return b; }));
    if (std::all_of(stream_done_.begin(), stream_done_.end(), [](bool b) { return b; }) && !done_) {
        if (!error_.empty()) out += sse({{"error", {{"message", error_}, {"type", "server_error"}, {"code", 500}}}});
        if (call_.include_usage)
            out += sse({{"id", id_}, {"object", call_.chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
                        {"model", call_.model}, {"choices", json::array()}, {"usage", usage()}});
        out += "data: [DONE]\n\n";
        done_ = true;
        auto u = usage();
        metrics_.tokens(u["prompt_tokens"], u["completion_tokens"]);
        metrics_.e2e.observe(std::chrono::duration<double>(Clock::now() - start_).count());
    }
    return out;
}

json CompletionStream::collect() {
    for (size_t s = 0; s < streams_.size(); ++s)
        while (auto ev = streams_[s]->next()) apply(s, *ev, nullptr);
    for (size_t s = 0; s < streams_.size(); ++s) stream_done_[s] = true;
    done_ = true;
    json out = {{"id", id_}, {"object", call_.chat ? "chat.completion" : "text_completion"}, {"created", created_},
                {"model", call_.model}, {"choices", json::array()}, {"usage", usage()}};
    for (size_t i = 0; i < choices_.size(); ++i) {
        if (call_.chat) {
            auto rest = choices_[i].split->flush();
            choices_[i].reasoning += rest.reasoning;
            choices_[i].text += rest.content;
        }
        out["choices"].push_back(final_choice(i));
    }
    auto u = usage();
    metrics_.tokens(u["prompt_tokens"], u["completion_tokens"]);
    metrics_.e2e.observe(std::chrono::duration<double>(Clock::now() - start_).count());
    return out;
}

}  // namespace deepinfer::server
