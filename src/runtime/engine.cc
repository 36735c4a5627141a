#include <filesystem>
#include <random>

#include "base/error.h"
#include "base/logging.h"
#include "runtime/engine_impl.h"

namespace deepinfer {

std::unique_ptr<Engine> Engine::create(const EngineConfig& config) {
    return std::make_unique<runtime::EngineImpl>(config);
}

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kStop: return "stop";
        case FinishReason::kLength: return "length";
        case FinishReason::kCancelled: return "cancelled";
        case FinishReason::kError: return "error";
        default: return "";
    }
}

}  // namespace deepinfer

namespace deepinfer::runtime {

// --- streams ---------------------------------------------------------------------------------

void RequestStreamImpl::push(RequestEvent ev) {
    std::function<void()> listener;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (ev.finished) closed_ = true;
        events_.push_back(std::move(ev));
        listener = listener_;
    }
    cv_.notify_all();
    if (listener) listener();
}

void RequestStreamImpl::set_listener(std::function<void()> listener) {
    bool waiting;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        listener_ = listener;
        waiting = !events_.empty();
    }
    if (waiting && listener) listener();
}

void RequestStreamImpl::detach() {
    std::lock_guard<std::mutex> lock(mutex_);
    engine_ = nullptr;
}

std::optional<RequestEvent> RequestStreamImpl::pop_locked() {
    RequestEvent ev = std::move(events_.front());
    events_.pop_front();
    return ev;
}

std::optional<RequestEvent> RequestStreamImpl::next() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return !events_.empty() || closed_; });
    if (events_.empty()) return std::nullopt;
    return pop_locked();
}

std::optional<RequestEvent> RequestStreamImpl::next_for(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty() || closed_; })) return RequestEvent{id_};
    if (events_.empty()) return std::nullopt;
    return pop_locked();
}

void RequestStreamImpl::cancel() {
    EngineImpl* engine;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (closed_ || engine_ == nullptr) return;
        engine = engine_;
    }
    engine->cancel(id_);
}

// --- engine ----------------------------------------------------------------------------------

EngineImpl::EngineImpl(const EngineConfig& config) : config_(config) {
    set_log_level(config.log_level);
    drafter_ = make_drafter(config.speculative);
    // A verification step writes its drafts into the cache; the rows they overwrite must outlive
    // the drafts that are not kept.
    if (drafter_) config_.model.rollback_tokens = std::max(config_.model.rollback_tokens, config.speculative.num_draft_tokens);
    const ModelConfig& mc = config_.model;
    DI_CHECK(!mc.path.empty(), "no model directory given");
    name_ = mc.name.empty() ? std::filesystem::path(mc.path).filename().string() : mc.name;
    if (name_.empty()) name_ = std::filesystem::path(mc.path).parent_path().filename().string();
    backend_ = kernels::make_backend(mc.device, mc.threads);
    DI_CHECK(backend_->execution().set_kernels(mc.kernels) || mc.kernels == KernelConfig{},
             "kernel knobs were given, but the {} backend has no kernel choices (they are CUDA's)", backend_->name());
    DI_CHECK(!config.deterministic || backend_->execution().set_batch_invariant(true),
             "deterministic mode: the {} backend's kernels are not batch-invariant (a row's result depends on the "
             "batch around it); use --device cpu",
             backend_->name());
    const std::string& method = config.speculative.method;
    bool modelled = (method == "dspark" || method == "mtp") && !config.speculative.drafter;
    model_ = model::load_causal_lm(mc.path, *backend_,
                                   {model::parse_weight_quant(mc.quantize), model::parse_precision(mc.precision), modelled});
    if (modelled) {
        draft_model_ = model_->draft_model();
        DI_CHECK(draft_model_ != nullptr && method == model_->draft_kind(),
                 "--speculative {}: the checkpoint in {} has no {} (DSpark: a deepseek_v41 config.json with dspark_* keys "
                 "and mtp.* tensors; MTP: a deepseek_v4 checkpoint with an mtp.0 head)",
                 method, mc.path, method == "dspark" ? "DSpark draft model" : "MTP head");
    }
    DI_CHECK(mc.swa_replay_tokens >= 0 && mc.rollback_tokens >= 0, "swa_replay_tokens and rollback_tokens must be >= 0");
    if (model_->configure_swa_replay(mc.swa_replay_tokens, mc.rollback_tokens) && mc.swa_replay_tokens > 0)
        spdlog::info("engine: SWA bounded replay over the last {} prompt tokens", mc.swa_replay_tokens);
    tokenizer_ = tokenizer::Tokenizer::from_dir(mc.tokenizer_path.empty() ? mc.path : mc.tokenizer_path);
    const CacheConfig& cc = config.cache;
    DI_CHECK(cc.max_sequences >= 1 && cc.block_size >= 1, "cache: max_sequences and block_size must be positive");
    cache_ = model_->make_cache(model_->plan_cache(cc.max_sequences, cc.memory_bytes, cc.block_size, mc.rollback_tokens));
    if (draft_model_) draft_model_->allocate(cache_->max_seqs());
    int64_t max_positions = model_->max_position_embeddings();
    DI_CHECK(cc.max_model_len <= max_positions, "max_model_len {} exceeds the model's max_position_embeddings ({})",
             cc.max_model_len, max_positions);
    max_model_len_ = std::min(cache_->token_capacity(), cc.max_model_len > 0 ? cc.max_model_len : max_positions);
    DI_CHECK(config.scheduler.max_batch_tokens >= 1 && config.scheduler.max_running >= 1,
             "scheduler: max_batch_tokens and max_running must be positive");
    scheduler_ = std::make_unique<Scheduler>(config.scheduler, *cache_);
    if (drafter_) {
        const std::string& verify = config.speculative.verify;
        DI_CHECK(verify == "confidence" || verify == "fixed", "speculative: verify mode '{}' is not confidence or fixed", verify);
        bool scheduled = verify == "confidence";
        scheduler_->set_speculation({drafter_.get(), config.speculative.num_draft_tokens, scheduled ? &step_cost_ : nullptr,
                                     scheduled ? &acceptance_ : nullptr});
    }
    start_prefix_cache();
    if (!config.trace_path.empty()) trace_.enable();
    // A step samples at most one row per sequence resident in the cache.
    penalty_slots_ = std::make_unique<PenaltySlots>(cache_->max_seqs());
    executor_ = std::make_unique<StepExecutor>(*model_, *cache_, &trace_, cache_->max_seqs());
    std::vector<int32_t> eos(model_->eos_token_ids().begin(), model_->eos_token_ids().end());
    if (auto e = tokenizer_->eos_id()) eos.push_back(*e);
    grammar_ = std::make_unique<GrammarService>(tokenizer_, static_cast<int32_t>(model_->vocab_size()), eos, config.structured);
    spdlog::info("engine: model {} ({} vocab), cache {:.1f} MiB, {} sequences, max model len {}", name_,
                 model_->vocab_size(), cache_->bytes() / 1048576.0, cache_->max_seqs(), max_model_len_);
    for (const auto& [kind, bytes] : cache_->bytes_by_kind()) spdlog::info("engine: cache {}: {:.1f} MiB", kind, bytes / 1048576.0);
    publish_stats();  // readers see the cache's shape (sizes, prefix span length) before the first step
    thread_ = std::thread([this] { loop(); });
}

// Prefix caching needs a model that rebuilds window rings after a hit, a replay that covers the
// window (plus rollback), and a cache with block-aligned spans.
void EngineImpl::start_prefix_cache() {
    const ModelConfig& mc = config_.model;
    const PrefixCacheConfig& pc = config_.cache.prefix;
    model::PrefixBlocks* blocks = cache_->prefix_blocks();
    if (!pc.enabled || !model_->rebuilds_windows() || mc.swa_replay_tokens <= 0 || blocks == nullptr) return;
    int window = model_->sliding_window();
    DI_CHECK(mc.swa_replay_tokens >= window + mc.rollback_tokens,
             "prefix caching replays {} tokens after a hit, which does not cover the sliding window ({}) plus the "
             "rollback depth ({}): use --swa-replay-tokens >= {} (or turn prefix caching off)",
             mc.swa_replay_tokens, window, mc.rollback_tokens, window + mc.rollback_tokens);
    // The resolved precision: "auto" and the precision it stands for on this device compute the same.
    model::Precision resolved = model::resolve_precision(model::parse_precision(mc.precision), backend_->device());
    std::string precision = model::precision_name(resolved);
    uint64_t space = prefix_namespace(mc.path, backend_->name(), blocks->prefix_geometry(),
                                      "quantize=" + mc.quantize + "|precision=" + precision);
    prefix_cache_ = std::make_unique<PrefixCache>(pc, PrefixReplay{mc.swa_replay_tokens, model_->exact_replay_tokens()},
                                                  space, *blocks, *backend_);
    scheduler_->set_prefix_cache(prefix_cache_.get());
}

EngineImpl::~EngineImpl() { shutdown(true); }

void EngineImpl::write_trace() {
    if (!trace_.enabled() || trace_written_) return;
    trace_written_ = true;
    try {
        trace_.write(config_.trace_path);
        spdlog::info("engine: trace written to {}", config_.trace_path);
    } catch (const std::exception& e) {
        spdlog::error("engine: {}", e.what());
    }
}

void EngineImpl::shutdown(bool cancel_running) {
    {
        std::lock_guard<std::mutex> lock(inbox_mutex_);
        stopping_ = true;
        cancel_on_stop_ = cancel_on_stop_ || cancel_running;
    }
    inbox_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    write_trace();
    // The engine thread is gone and no step runs: what the cache holds can be written below.
    if (prefix_cache_) {
        prefix_cache_->write_back_all(5000);
        publish_stats();
    }
}

std::vector<int32_t> EngineImpl::tokenize(const std::string& text, bool add_special_tokens) const {
    auto ids = tokenizer_->encode(text, add_special_tokens);
    DI_CHECK(ids.ok(), "{}", ids.status().message());
    return std::move(ids).value();
}

std::string EngineImpl::detokenize(const std::vector<int32_t>& tokens, bool skip_special_tokens) const {
    return tokenizer_->decode(tokens, skip_special_tokens);
}

// Fills prompt_tokens; returns an error message for a request that can never run.
std::string EngineImpl::check_request(GenerationRequest& r) const {
    std::string bad = r.sampling.validate(static_cast<int32_t>(model_->vocab_size()));
    if (!bad.empty()) return bad;
    r.deterministic = r.deterministic || config_.deterministic;
    if (r.deterministic && !backend_->execution().batch_invariant())
        return std::string("deterministic: the ") + backend_->name() +
               " backend runs batch-dependent kernels unless the engine is started with --deterministic";
    if (r.prompt_tokens.empty()) {
        auto ids = tokenizer_->encode(r.prompt, true);
        if (!ids.ok()) return "prompt: " + ids.status().message();
        r.prompt_tokens = std::move(ids).value();
    }
    if (r.prompt_tokens.empty()) return "prompt is empty";
    for (int32_t t : r.prompt_tokens)
        if (t < 0 || t >= model_->vocab_size()) return "prompt token id " + std::to_string(t) + " is out of range";
    int64_t need = static_cast<int64_t>(r.prompt_tokens.size()) + r.sampling.max_tokens;
    if (need > max_model_len_)
        return "prompt (" + std::to_string(r.prompt_tokens.size()) + " tokens) plus max_tokens (" +
               std::to_string(r.sampling.max_tokens) + ") exceeds the maximum context of " + std::to_string(max_model_len_) +
               " tokens";
    return {};
}

std::shared_ptr<RequestStream> EngineImpl::submit(GenerationRequest request) {
    auto rs = std::make_unique<RequestState>();
    rs->id = next_id_++;
    rs->stream = std::make_shared<RequestStreamImpl>(rs->id, this);
    rs->arrival = std::chrono::steady_clock::now();
    auto stream = rs->stream;
    std::string error = check_request(request);
    if (error.empty() && request.grammar.active()) {  // compiled here, on the caller's thread
        auto compiled = grammar_->compile(request.grammar);
        if (compiled.ok()) rs->grammar = std::move(compiled).value();
        else error = "structured output: " + compiled.status().message();
    }
    if (!error.empty() && request.span_sink) request.span_sink->on_done(0);
    if (!error.empty()) {
        RequestEvent ev{rs->id};
        ev.finished = true;
        ev.error = error;
        stream->push(std::move(ev));
        stream->detach();
        return stream;
    }
    // A deterministic request without a seed draws as if seeded with 0, so that it samples alike
    // in every run.
    if (!request.sampling.seed)
        request.sampling.seed = request.deterministic ? 0 : std::random_device{}() * 0x9E3779B97F4A7C15ull + rs->id;
    rs->request = std::move(request);
    {
        std::lock_guard<std::mutex> lock(inbox_mutex_);
        if (stopping_) {
            if (rs->request.span_sink) rs->request.span_sink->on_done(0);
            RequestEvent ev{rs->id};
            ev.finished = true;
            ev.error = "the engine is shutting down";
            stream->push(std::move(ev));
            stream->detach();
            return stream;
        }
        inbox_.push_back(std::move(rs));
    }
    inbox_cv_.notify_all();
    return stream;
}

void EngineImpl::cancel(RequestId id) {
    {
        std::lock_guard<std::mutex> lock(inbox_mutex_);
        cancels_.push_back(id);
    }
    inbox_cv_.notify_all();
}

int EngineImpl::import_prefix_spans(std::vector<std::vector<std::byte>> blobs) {
    if (!prefix_cache_) return 0;
    std::vector<std::vector<std::byte>> good;
    for (auto& b : blobs) {
        std::string bad = prefix_cache_->check_import(b);
        if (bad.empty()) good.push_back(std::move(b));
        else spdlog::warn("engine: a transferred prefix span is unusable and was dropped: {}", bad);
    }
    int accepted = static_cast<int>(good.size());
    {
        std::lock_guard<std::mutex> lock(inbox_mutex_);
        for (auto& b : good) imports_.push_back(std::move(b));
    }
    inbox_cv_.notify_all();
    return accepted;
}

void EngineImpl::trace_span(const std::string& name, std::chrono::steady_clock::time_point begin,
                            std::chrono::steady_clock::time_point end, const std::vector<std::pair<std::string, double>>& args) {
    if (!trace_.enabled()) return;
    nlohmann::json a = nlohmann::json::object();
    for (const auto& [k, v] : args) a[k] = v;
    trace_.span_on_track("disaggregation", name, trace_.us_of(begin), trace_.us_of(end), std::move(a));
}

EngineStats EngineImpl::stats() const {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    return stats_;
}

}  // namespace deepinfer::runtime
