#include "server/metrics.h"

#include <fmt/format.h>

namespace deepinfer::server {

void Histogram::observe(double v) {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
    std::lock_guard<std::mutex> lock(mutex_);
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
        cumulative += counts_[i];
        out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
    }
    out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
}

static std::vector<double> ttft_bounds() { return {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60}; }

Metrics::Metrics()
    : ttft({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      itl({0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5}),
      e2e({0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}),
      transfer_seconds({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10}),
      queue_seconds({0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60}),
      ttft_queue(ttft_bounds()), ttft_prefill(ttft_bounds()), ttft_transfer(ttft_bounds()), ttft_first_decode(ttft_bounds()) {}

void Metrics::transfer(const std::string& result, const std::string& transport, int64_t bytes, double seconds) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        ++transfers_[{result, transport}];
    }
    transfer_bytes_ += static_cast<uint64_t>(bytes);
    transfer_seconds.observe(seconds);
}

void Metrics::request_finished(const std::string& endpoint, int status) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++requests_[{endpoint, status}];
}

void Metrics::rejected(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++rejected_[reason];
}

void Metrics::tokens(int prompt, int completion) {
    prompt_tokens_ += static_cast<uint64_t>(prompt);
    completion_tokens_ += static_cast<uint64_t>(completion);
}

// Speculative decoding: verifications, drafts and kept drafts, and per draft position the drafts
// proposed and kept there (acceptance by position = accepted / proposed).
static void render_speculative(std::string& out, const SpeculativeStats& sp, const std::string& model) {
    if (sp.verifications == 0) return;
    auto counter = [&](const char* name, const char* help, int64_t v) {
        out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{}{{model=\"{}\"}} {}\n", name, help, name, name, model, v);
    };
    counter("deepinfer_spec_verifications_total", "Speculative chunks verified (a sequence's last token and its drafts).",
            sp.verifications);
    counter("deepinfer_spec_draft_tokens_total", "Drafted tokens verified.", sp.draft_tokens);
    counter("deepinfer_spec_accepted_tokens_total", "Drafted tokens kept (mean tokens per verification: (this + "
            "verifications) / verifications).", sp.accepted_tokens);
    auto by_position = [&](const char* name, const char* help, const std::vector<int64_t>& v) {
        out += fmt::format("# HELP {} {}\n# TYPE {} counter\n", name, help, name);
        for (size_t i = 0; i < v.size(); ++i) out += fmt::format("{}{{model=\"{}\",position=\"{}\"}} {}\n", name, model, i + 1, v[i]);
    };
    by_position("deepinfer_spec_proposed_at_total", "Drafts proposed at each draft position.", sp.proposed_at);
    by_position("deepinfer_spec_accepted_at_total", "Drafts kept at each draft position.", sp.accepted_at);
}

// The prefix cache: overall lookups and hits, and per tier what it spared, holds, read and wrote.
static void render_prefix_cache(std::string& out, const PrefixCacheStats& pc, const std::string& model) {
    if (!pc.enabled) return;
    out += fmt::format("# HELP deepinfer_prefix_cache_lookup_tokens_total Prompt tokens looked up in the prefix cache.\n"
                       "# TYPE deepinfer_prefix_cache_lookup_tokens_total counter\n"
                       "deepinfer_prefix_cache_lookup_tokens_total{{model=\"{}\"}} {}\n",
                       model, pc.lookup_tokens);
    out += fmt::format("# HELP deepinfer_prefix_cache_hit_tokens_total Prompt tokens taken from the prefix cache (hit rate: over lookups).\n"
                       "# TYPE deepinfer_prefix_cache_hit_tokens_total counter\n"
                       "deepinfer_prefix_cache_hit_tokens_total{{model=\"{}\"}} {}\n",
                       model, pc.hit_tokens);
    struct Series {
        const char* name;
        const char* type;
        const char* help;
        double (*get)(const PrefixCacheTierStats&);
    };
    static const Series series[] = {
        {"deepinfer_prefix_cache_tier_hit_tokens_total", "counter", "Prompt tokens spared by hits served from the tier.",
         [](const PrefixCacheTierStats& t) { return double(t.hit_tokens); }},
        {"deepinfer_prefix_cache_tier_entries", "gauge", "Cached spans the tier holds.", [](const PrefixCacheTierStats& t) { return double(t.entries); }},
        {"deepinfer_prefix_cache_tier_bytes", "gauge", "Bytes the tier holds.", [](const PrefixCacheTierStats& t) { return double(t.bytes); }},
        {"deepinfer_prefix_cache_tier_read_bytes_total", "counter", "Bytes read back from the tier.",
         [](const PrefixCacheTierStats& t) { return double(t.bytes_read); }},
        {"deepinfer_prefix_cache_tier_written_bytes_total", "counter", "Bytes written to the tier.",
         [](const PrefixCacheTierStats& t) { return double(t.bytes_written); }},
        {"deepinfer_prefix_cache_tier_evictions_total", "counter", "Spans evicted from the tier.",
         [](const PrefixCacheTierStats& t) { return double(t.evictions); }},
        {"deepinfer_prefix_cache_tier_errors_total", "counter", "Unusable entries and failed I/O of the tier (each a miss).",
         [](const PrefixCacheTierStats& t) { return double(t.errors); }},
    };
    for (const Series& s : series) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", s.name, s.help, s.name, s.type);
        for (const auto& t : pc.tiers) out += fmt::format("{}{{model=\"{}\",tier=\"{}\"}} {}\n", s.name, model, t.tier, s.get(t));
    }
}

std::string Metrics::render(const EngineStats& st, const std::string& model, const ServerGauges& server) const {
    std::string out;
    auto gauge = [&](const char* name, const char* help, double v) {
        out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{}{{model=\"{}\"}} {}\n", name, help, name, name, model, v);
    };
    auto counter = [&](const char* name, const char* help, double v) {
        out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{}{{model=\"{}\"}} {}\n", name, help, name, name, model, v);
    };
    {
        std::lock_guard<std::mutex> lock(mutex_);
        out += "# HELP deepinfer_requests_total HTTP requests by endpoint and status.\n# TYPE deepinfer_requests_total counter\n";
        for (const auto& [key, n] : requests_)
            out += fmt::format("deepinfer_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
        out += "# HELP deepinfer_rejected_total Requests and connections refused by a server limit, by reason.\n"
               "# TYPE deepinfer_rejected_total counter\n";
        for (const auto& [reason, n] : rejected_) out += fmt::format("deepinfer_rejected_total{{reason=\"{}\"}} {}\n", reason, n);
        out += "# HELP deepinfer_pd_transfers_total Prompt states fetched from a prefill instance, by result (failed = computed "
               "locally; skipped = shorter than a span, computed locally without asking).\n"
               "# TYPE deepinfer_pd_transfers_total counter\n";
        for (const auto& [key, n] : transfers_)
            out += fmt::format("deepinfer_pd_transfers_total{{result=\"{}\",transport=\"{}\"}} {}\n", key.first, key.second, n);
    }
    counter("deepinfer_pd_transfer_bytes_total", "Bytes of prompt state received from prefill instances.", static_cast<double>(transfer_bytes_));
    counter("deepinfer_prompt_tokens_total", "Prompt tokens of finished requests.", static_cast<double>(prompt_tokens_));
    counter("deepinfer_generation_tokens_total", "Generated tokens of finished requests.", static_cast<double>(completion_tokens_));
    gauge("deepinfer_requests_active", "Completion requests accepted and not yet answered.", static_cast<double>(server.active_requests));
    gauge("deepinfer_open_connections", "Open HTTP connections.", static_cast<double>(server.open_connections));
    gauge("deepinfer_queue_length", "Sequences waiting to be scheduled.", static_cast<double>(st.requests_waiting));
    gauge("deepinfer_running_batch", "Sequences in the running batch.", static_cast<double>(st.requests_running));
    gauge("deepinfer_cache_usage_ratio", "Fraction of the cache in use.", st.cache_usage);
    out += "# HELP deepinfer_cache_bytes Bytes of cache memory by kind of state.\n# TYPE deepinfer_cache_bytes gauge\n";
    for (const auto& [kind, bytes] : st.cache_bytes_by_kind)
        out += fmt::format("deepinfer_cache_bytes{{model=\"{}\",kind=\"{}\"}} {}\n", model, kind, bytes);
    counter("deepinfer_preemptions_total", "Sequences preempted (recomputed later).", static_cast<double>(st.preemptions));
    counter("deepinfer_engine_steps_total", "Forward steps run.", static_cast<double>(st.steps));
    counter("deepinfer_grammar_masks_total", "Structured-output token masks computed.", static_cast<double>(st.grammar_masks));
    counter("deepinfer_grammar_late_masks_total", "Token masks not ready by their step's deadline (the sequence waited).",
            static_cast<double>(st.grammar_late_masks));
    render_speculative(out, st.speculative, model);
    render_prefix_cache(out, st.prefix_cache, model);
    ttft.render(out, "deepinfer_time_to_first_token_seconds", "Time from request arrival to the first token.");
    itl.render(out, "deepinfer_inter_token_latency_seconds", "Time between tokens of a stream.");
    e2e.render(out, "deepinfer_request_latency_seconds", "Time from request arrival to its last token.");
    transfer_seconds.render(out, "deepinfer_pd_transfer_seconds", "Time to fetch a prompt's state from a prefill instance (its prefill included).");
    queue_seconds.render(out, "deepinfer_queue_seconds", "Time from a request's submission to its first engine step.");
    ttft_queue.render(out, "deepinfer_ttft_queue_seconds", "TTFT part: waiting for the first engine step here.");
    ttft_prefill.render(out, "deepinfer_ttft_prefill_seconds", "TTFT part: the prefill (here with the first token, or on the prefill instance).");
    ttft_transfer.render(out, "deepinfer_ttft_transfer_seconds", "TTFT part: moving the prompt's state from the prefill instance.");
    ttft_first_decode.render(out, "deepinfer_ttft_first_decode_seconds", "TTFT part after a transfer: the window replay and the first token here.");
    return out;
}

}  // namespace deepinfer::server
