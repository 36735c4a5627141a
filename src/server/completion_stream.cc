#include "server/completion_stream.h"

#include <algorithm>
#include <atomic>
#include <numeric>

namespace deepinfer::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string sse(const json& j) { return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n"; }

// OpenAI's finish reasons; a cancelled or failed sequence ends the call with an error instead.
std::string finish_name(FinishReason r) {
    switch (r) {
        case FinishReason::kStop: return "stop";
        case FinishReason::kLength: return "length";
        default: return "";
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
    choices_.resize(call_.requests.size() * call_.choices_per_request());
    for (auto& c : choices_)
        if (call_.chat) c.split = std::make_unique<tokenizer::ReasoningStream>(call_.thinking);
    for (auto& r : call_.requests) {
        streams_.push_back(engine_.submit(r));
        stream_done_.push_back(false);
        cached_tokens_.push_back(0);
    }
}

CompletionStream::~CompletionStream() {
    for (auto& s : streams_) s->set_listener(nullptr);
    cancel();
}

void CompletionStream::set_listener(const std::function<void()>& listener) {
    for (auto& s : streams_) s->set_listener(listener);
}

void CompletionStream::cancel() {
    for (size_t i = 0; i < streams_.size(); ++i)
        if (!stream_done_[i]) streams_[i]->cancel();
}

json CompletionStream::logprob_entries(const SequenceEvent& se) {
    json out = json::array();
    for (size_t t = 0; t < se.logprobs.size(); ++t) {
        std::string tok = engine_.detokenize({se.logprobs[t].token}, false);
        json e = {{"token", tok}, {"logprob", se.logprobs[t].logprob}, {"bytes", bytes_of(tok)}, {"top_logprobs", json::array()}};
        if (t < se.top_logprobs.size())
            for (const auto& alt : se.top_logprobs[t]) {
                std::string a = engine_.detokenize({alt.token}, false);
                e["top_logprobs"].push_back({{"token", a}, {"logprob", alt.logprob}, {"bytes", bytes_of(a)}});
            }
        out.push_back(std::move(e));
    }
    return out;
}

// OpenAI's legacy completions logprobs layout from chat-style entries; offsets count the
// choice's text bytes before each token.
json CompletionStream::completions_logprobs(const json& entries, size_t text_offset) const {
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

json CompletionStream::chunk(size_t choice, json delta_or_text, json logprobs, const std::string& finish) {
    json c = {{"index", choice}, {call_.chat ? "delta" : "text", std::move(delta_or_text)}, {"logprobs", std::move(logprobs)},
              {"finish_reason", finish.empty() ? json() : json(finish)}};
    return {{"id", id_}, {"object", call_.chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
            {"model", call_.model}, {"choices", json::array({std::move(c)})}};
}

std::string CompletionStream::prompt_text(size_t choice) const {
    return engine_.detokenize(call_.requests[choice / call_.choices_per_request()].prompt_tokens, true);
}

void CompletionStream::apply(size_t s, const RequestEvent& ev, std::string* out) {
    if (!ev.error.empty()) error_ = ev.error;
    cached_tokens_[s] = std::max(cached_tokens_[s], ev.cached_tokens);
    for (const auto& se : ev.sequences) {
        size_t ci = s * call_.choices_per_request() + se.index;
        Choice& c = choices_[ci];
        if (!se.tokens.empty()) {
            auto now = Clock::now();
            if (!any_token_) metrics_.ttft.observe(std::chrono::duration<double>(now - start_).count());
            else metrics_.itl.observe(std::chrono::duration<double>(now - last_token_).count() / se.tokens.size());
            any_token_ = true;
            last_token_ = now;
        }
        if (se.finish == FinishReason::kCancelled) cancelled_ = true;
        c.tokens.insert(c.tokens.end(), se.tokens.begin(), se.tokens.end());
        for (const auto& l : se.logprobs) c.logprob_sum += l.logprob;
        json lp = se.logprobs.empty() || call_.top_logprobs < 0 ? json::array() : logprob_entries(se);
        for (auto& e : lp) c.logprobs.push_back(e);
        std::string finish = finish_name(se.finish);
        if (call_.chat) apply_chat(ci, se, lp, finish, out);
        else apply_completion(ci, se, lp, finish, out);
    }
    if (ev.finished) stream_done_[s] = true;
}

void CompletionStream::apply_completion(size_t ci, const SequenceEvent& se, const json& lp, const std::string& finish, std::string* out) {
    Choice& c = choices_[ci];
    std::string text = se.text;
    if (!c.sent_first && call_.echo && out) text = prompt_text(ci) + text;  // streamed echo: the prompt comes first
    c.text += se.text;
    if (!finish.empty()) c.finish = finish;
    if (!out || (text.empty() && finish.empty() && lp.empty())) return;
    c.sent_first = true;
    json logprobs = lp.empty() ? json() : completions_logprobs(lp, c.text_offset);
    c.text_offset += text.size();
    *out += sse(chunk(ci, text, std::move(logprobs), finish));
}

json CompletionStream::tool_call_deltas(Choice& c, const std::vector<tokenizer::ToolCallStream::CallDelta>& calls) {
    json deltas = json::array();
    for (const auto& d : calls) {
        if (!call_.parallel_tool_calls && d.index > 0) continue;  // only the first call was asked for
        json delta = {{"index", d.index}, {"function", {{"arguments", d.arguments}}}};
        if (d.opens) {
            c.tool_calls.push_back({{"id", next_call_id()}, {"type", "function"}, {"function", {{"name", d.name}, {"arguments", ""}}}});
            delta["id"] = c.tool_calls.back()["id"];
            delta["type"] = "function";
            delta["function"]["name"] = d.name;
        }
        if (d.closes) c.tool_calls[d.index]["function"]["arguments"] = d.arguments;
        deltas.push_back(std::move(delta));
    }
    return deltas;
}

void CompletionStream::apply_chat(size_t ci, const SequenceEvent& se, const json& lp, const std::string& finish, std::string* out) {
    Choice& c = choices_[ci];
    tokenizer::ReasoningStream::Delta d = c.split->push(se.text);
    bool last = se.finish != FinishReason::kNone;
    if (last) {
        auto rest = c.split->flush();
        d.reasoning += rest.reasoning;
        d.content += rest.content;
    }
    c.reasoning += d.reasoning;
    json calls = json::array();
    std::string content = d.content;
    if (call_.has_tools) {
        tokenizer::ToolCallStream::Delta t = c.tools.push(d.content);
        if (last) {
            auto rest = c.tools.flush();
            t.content += rest.content;
            t.calls.insert(t.calls.end(), rest.calls.begin(), rest.calls.end());
        }
        content = t.content;
        calls = tool_call_deltas(c, t.calls);
    }
    c.text += content;
    std::string reason = finish == "stop" && !c.tool_calls.empty() ? "tool_calls" : finish;  // a cut-off call stays "length"
    if (!reason.empty()) c.finish = reason;
    json delta = json::object();
    if (!c.sent_first) delta["role"] = "assistant";
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!content.empty()) delta["content"] = content;
    if (!calls.empty()) delta["tool_calls"] = std::move(calls);
    if (!out || (delta.empty() && reason.empty() && lp.empty())) return;
    c.sent_first = true;
    *out += sse(chunk(ci, std::move(delta), lp.empty() ? json() : json{{"content", lp}}, reason));
}

json CompletionStream::usage() const {
    int prompt = 0, completion = 0;
    for (const auto& r : call_.requests) prompt += static_cast<int>(r.prompt_tokens.size());
    for (const auto& c : choices_) completion += static_cast<int>(c.tokens.size());
    int cached = 0;
    for (int c : cached_tokens_) cached += c;
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

void CompletionStream::finish_metrics() {
    auto u = usage();
    metrics_.tokens(u["prompt_tokens"], u["completion_tokens"]);
    metrics_.e2e.observe(std::chrono::duration<double>(Clock::now() - start_).count());
}

std::string CompletionStream::poll() {
    std::string out;
    std::string* sink = call_.stream ? &out : nullptr;
    for (size_t s = 0; s < streams_.size(); ++s) {
        while (!stream_done_[s]) {
            auto ev = streams_[s]->next_for(std::chrono::milliseconds(0));
            if (!ev) {
                stream_done_[s] = true;
                break;
            }
            if (ev->sequences.empty() && !ev->finished && ev->error.empty()) break;  // nothing more yet
            apply(s, *ev, sink);
        }
    }
    if (done_ || !std::all_of(stream_done_.begin(), stream_done_.end(), [](bool b) { return b; })) return out;
    done_ = true;
    finish_metrics();
    if (!call_.stream) return out;
    if (!error_.empty() || cancelled_) {
        std::string message = error_.empty() ? "the request was cancelled (the server is shutting down)" : error_;
        out += sse({{"error", {{"message", message}, {"type", "server_error"}, {"param", nullptr}, {"code", error_.empty() ? 503 : 500}}}});
    } else if (call_.include_usage) {
        out += sse({{"id", id_}, {"object", call_.chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
                    {"model", call_.model}, {"choices", json::array()}, {"usage", usage()}});
    }
    out += "data: [DONE]\n\n";
    return out;
}

// Per prompt, the choices returned: all of them, or with best_of the n with the highest summed
// logprob, most likely first.
std::vector<size_t> CompletionStream::returned_choices() const {
    size_t per = static_cast<size_t>(call_.choices_per_request());
    std::vector<size_t> out;
    for (size_t r = 0; r < call_.requests.size(); ++r) {
        std::vector<size_t> group(per);
        std::iota(group.begin(), group.end(), r * per);
        if (call_.best_of > 0) {
            std::stable_sort(group.begin(), group.end(),
                             [&](size_t a, size_t b) { return choices_[a].logprob_sum > choices_[b].logprob_sum; });
            group.resize(static_cast<size_t>(call_.n));
        }
        out.insert(out.end(), group.begin(), group.end());
    }
    return out;
}

json CompletionStream::final_choice(size_t i, size_t index) {
    Choice& c = choices_[i];
    json out = {{"index", index}, {"finish_reason", c.finish.empty() ? json() : json(c.finish)}};
    if (!call_.chat) {
        std::string prefix = call_.echo ? prompt_text(i) : "";
        out["text"] = prefix + c.text;
        out["logprobs"] = call_.top_logprobs >= 0 ? completions_logprobs(c.logprobs, prefix.size()) : json();
        return out;
    }
    json msg = {{"role", "assistant"}, {"content", c.text}};
    if (call_.thinking) msg["reasoning_content"] = c.reasoning;
    if (!c.tool_calls.empty()) msg["tool_calls"] = c.tool_calls;
    out["message"] = msg;
    out["logprobs"] = call_.top_logprobs >= 0 ? json{{"content", c.logprobs}} : json();
    return out;
}

std::variant<json, ApiError> CompletionStream::response() {
    if (!error_.empty()) return ApiError{500, error_, "", "server_error"};
    if (cancelled_) return ApiError{503, "the request was cancelled (the server is shutting down)", "", "server_error"};
    json out = {{"id", id_}, {"object", call_.chat ? "chat.completion" : "text_completion"}, {"created", created_},
                {"model", call_.model}, {"choices", json::array()}, {"usage", usage()}};
    std::vector<size_t> order = returned_choices();
    for (size_t k = 0; k < order.size(); ++k) out["choices"].push_back(final_choice(order[k], k));
    return out;
}

}  // namespace deepinfer::server
