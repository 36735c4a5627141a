// Structured output on the engine thread: masks are submitted when a step is launched (each
// matcher already holds every token sampled before that step), the step executor applies those
// done by the step's deadline, and a late row's sample waits here until its mask is done.
#include "base/error.h"
#include "runtime/engine_impl.h"

namespace deepinfer::runtime {

std::string EngineImpl::check_grammar(const GrammarSpec& spec) {
    auto compiled = grammar_->compile(spec);
    return compiled.ok() ? std::string() : compiled.status().message();
}

std::shared_ptr<StepMasks> EngineImpl::submit_masks(const StepPlan& plan) {
    std::vector<int32_t> rows;
    std::vector<Sequence*> seqs;
    int32_t row = 0;
    for (const ScheduledChunk& c : plan.chunks) {
        if (!c.samples) continue;
        if (c.seq->grammar) rows.push_back(row), seqs.push_back(c.seq);
        row += static_cast<int32_t>(c.sample_rows());
    }
    if (rows.empty()) return nullptr;
    auto masks = std::make_shared<StepMasks>(std::move(rows), grammar_->mask_words(), config_.structured.mask_deadline_ms);
    for (size_t i = 0; i < seqs.size(); ++i) grammar_->submit(seqs[i]->grammar->matcher, masks, i);
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.grammar_masks += static_cast<int64_t>(seqs.size());
    return masks;
}

void EngineImpl::defer_sample(Sequence& s, const StepOutput& step, size_t mask_row) {
    SequenceGrammar& g = *s.grammar;
    g.late_masks = step.masks;
    g.late_row = mask_row;
    g.late_logits = step.late_logits.at(mask_row);
    late_samples_.push_back(&s);
    std::lock_guard<std::mutex> lock(stats_mutex_);
    ++stats_.grammar_late_masks;
}

// Samples every late row whose mask is done now, from its kept logits with the mask applied on
// the host, with the host sampler (the same choice the device would have made: sampling depends
// only on the logits, the history and (seed, position)).
void EngineImpl::resolve_late_samples() {
    int64_t vocab = model_->vocab_size(), detokenize_us = 0;
    std::erase_if(late_samples_, [&](Sequence* s) {
        SequenceGrammar& g = *s->grammar;
        if (s->finished() || s->request->cancelled) return true;
        if (!g.late_masks->done(g.late_row)) return false;
        apply_token_mask_on_host(g.late_logits.data(), vocab, g.late_masks->row_words(g.late_row));
        const SamplingParams& p = s->request->request.sampling;
        std::span<const int32_t> prompt(s->tokens.data(), s->prompt_len);
        std::span<const int32_t> output(s->tokens.data() + s->prompt_len, s->tokens.size() - s->prompt_len);
        SampleOutput out = sample_token({g.late_logits, &p, s->seed, static_cast<int64_t>(s->tokens.size()), prompt, output});
        g.late_masks.reset();
        g.late_logits = {};
        append_token(*s, std::move(out), detokenize_us);
        penalty_slots_->release(s);  // its device penalty row lacks this token: rewritten when it next samples
        return true;
    });
}

bool EngineImpl::advance_grammar(Sequence& s, int32_t token, RequestEvent& ev, SequenceEvent& se) {
    if (s.grammar->matcher->accept_token(token)) return true;
    // The mask allowed only tokens the matcher accepts; this is a bug, reported as one.
    s.finish = se.finish = FinishReason::kError;
    ev.error = "structured output: the grammar refused token " + std::to_string(token) + " that its mask allowed";
    return false;
}

}  // namespace deepinfer::runtime
