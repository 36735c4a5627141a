#include "runtime/grammar_masks.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace deepinfer::runtime {

StepMasks::StepMasks(std::vector<int32_t> logit_rows, int32_t words, double deadline_ms)
    : logit_rows_(std::move(logit_rows)), words_(words), deadline_ms_(deadline_ms),
      bits_(logit_rows_.size() * static_cast<size_t>(words)), done_(logit_rows_.size(), 0), applied_(logit_rows_.size(), 0) {}

void StepMasks::mark_done(size_t i) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        done_[i] = 1;
        ++num_done_;
    }
    cv_.notify_all();
}

bool StepMasks::done(size_t i) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_[i] != 0;
}

bool StepMasks::all_done() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return num_done_ == done_.size();
}

const std::vector<uint8_t>& StepMasks::close() {
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(deadline_ms_));
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_until(lock, deadline, [&] { return num_done_ == done_.size(); });
    applied_ = done_;
    return applied_;
}

void apply_token_mask_on_host(float* logits, int64_t vocab, const uint32_t* words) {
    for (int64_t v = 0; v < vocab; ++v)
        if (!((words[v >> 5] >> (v & 31)) & 1u)) logits[v] = -std::numeric_limits<float>::infinity();
}

namespace {

int default_mask_threads() {
    int cores = static_cast<int>(std::thread::hardware_concurrency());
    return std::clamp(cores / 4, 1, 8);
}

}  // namespace

GrammarService::GrammarService(std::shared_ptr<const tokenizer::Tokenizer> tokenizer, int32_t vocab_size,
                               std::vector<int32_t> eos_ids, const StructuredOutputConfig& config)
    : tokenizer_(std::move(tokenizer)), vocab_size_(vocab_size), eos_ids_(std::move(eos_ids)), config_(config) {
    int threads = config.mask_threads > 0 ? config.mask_threads : default_mask_threads();
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

GrammarService::~GrammarService() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
}

// The vocabulary as the grammar engine sees it: the logit dimension, each id's bytes, special ids
// (never allowed) and the EOS ids (allowed where the grammar can end).
grammar::GrammarCompiler& GrammarService::compiler() {
    std::call_once(vocabulary_once_, [&] {
        std::vector<std::string> bytes(static_cast<size_t>(vocab_size_));
        std::vector<uint8_t> special(static_cast<size_t>(vocab_size_), 0);
        for (int32_t id = 0; id < vocab_size_ && id < tokenizer_->vocab_size(); ++id) {
            if (!tokenizer_->is_valid_id(id)) continue;
            bytes[id] = tokenizer_->token_bytes(id);
            special[id] = tokenizer_->is_special(id);
        }
        auto vocab = grammar::Vocabulary::create(std::move(bytes), std::move(special), eos_ids_);
        compiler_ = std::make_unique<grammar::GrammarCompiler>(vocab, static_cast<size_t>(std::max(1, config_.compile_cache)));
    });
    return *compiler_;
}

Result<std::shared_ptr<const grammar::CompiledGrammar>> GrammarService::compile(const GrammarSpec& spec) {
    grammar::CompileOptions options;
    options.json.whitespace = spec.flexible_whitespace ? grammar::JsonWhitespace::kFlexible : grammar::JsonWhitespace::kCompact;
    options.json.formats = spec.format_annotations ? grammar::JsonFormats::kAnnotation : grammar::JsonFormats::kAssert;
    grammar::GrammarKind kind = spec.kind == GrammarSpec::Kind::kJsonSchema ? grammar::GrammarKind::kJsonSchema
                                : spec.kind == GrammarSpec::Kind::kRegex    ? grammar::GrammarKind::kRegex
                                                                            : grammar::GrammarKind::kEbnf;
    if (!spec.active()) return Status::invalid_argument("no grammar given");
    Result<std::shared_ptr<const grammar::CompiledGrammar>> compiled = Status::invalid_argument("");
    try {
        compiled = compiler().compile(kind, spec.text, options);
    } catch (const std::exception& e) {  // the compiler reports grammar errors; anything else is still the request's
        return Status::invalid_argument(e.what());
    }
    if (compiled.ok() && compiled.value()->accepts_nothing())
        return Status::invalid_argument("the grammar accepts no output at all");
    return compiled;
}

void GrammarService::submit(std::shared_ptr<grammar::GrammarMatcher> matcher, std::shared_ptr<StepMasks> masks, size_t row) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        jobs_.push_back({std::move(matcher), std::move(masks), row});
    }
    cv_.notify_one();
}

void GrammarService::work() {
    for (;;) {
        Job job;
        bool slow = false;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
            if (jobs_.empty()) return;
            job = std::move(jobs_.front());
            jobs_.pop_front();
            ++jobs_started_;
            slow = config_.test_slow_mask_every > 0 && jobs_started_ % config_.test_slow_mask_every == 0;
        }
        job.matcher->fill_next_token_bitmask(job.masks->row_words(job.row));
        if (slow) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(config_.test_mask_delay_ms));
        job.masks->mark_done(job.row);
    }
}

}  // namespace deepinfer::runtime
