// Speculative decoding on the engine thread. A verified chunk computes a sequence's last token and
// the drafts after it in one step, and samples after every position with the draw each position
// gets without drafts (sampling is keyed by (seed, position)). Sample i is the token the sequence
// would take after its i-th draft; so draft i is kept exactly when sample i - 1 equals it, and the
// first sample that differs (or the one after the last draft) is the sequence's next token. For a
// drafter that proposes single tokens this is the rejection rule of speculative sampling with a
// point-mass draft (keep with probability p(draft), else draw from p without the draft), and on
// batch-invariant kernels the output is bit for bit what decoding without drafts gives.
// Sampled drafts of a draft model come with their distribution q: those chunks bring the
// target's raw rows back and keep drafts by the general rule (speculative/rejection.h), which
// keeps more of them when q resembles the target; the output then has the target's
// distribution but is not the sequence decoding without drafts samples.
//
// With penalties or a grammar, a draft changes the history (and the matcher state) the next
// position is sampled with: the rows after drafts come back raw and are sampled on the host with
// the drafts in the history and the mask of a matcher that took them.
//
// The positions after the last kept token were written into the cache by the step; they are not
// computed as far as the sequence knows (num_computed stops before them), and the cache's ring and
// carry slack (ModelConfig::rollback_tokens) keeps every row the kept positions still need.
#include <algorithm>
#include <chrono>
#include <memory>

#include "kernels/cpu/cpu_sampler.h"
#include "runtime/engine_impl.h"
#include "runtime/sampler.h"
#include "runtime/speculative/rejection.h"

namespace deepinfer::runtime {
namespace {

// Whether chunk c verifies a draft model's draft (made from the chunk's first position, the
// sequence's last token).
bool verifies_model_draft(const ScheduledChunk& c) { return c.seq->drafted_for == c.start + 1; }

}  // namespace

bool EngineImpl::speculates(const GenerationRequest&) const { return drafter_ != nullptr; }

bool EngineImpl::host_samples_after_drafts(const ScheduledChunk& c) const {
    return !c.draft.empty() && (needs_penalty_state(c.seq->request->request.sampling) || c.seq->grammar);
}

size_t EngineImpl::raw_rows_of(const ScheduledChunk& c) const {
    return drafts_have_distribution(c) || host_samples_after_drafts(c) ? c.draft.size() : 0;
}

// The sample after draft i (i >= 1) from the row's raw logits by the host sampler (the device's
// choice for those logits, history and (seed, position)), with the drafts before it in the
// penalty history and, under a grammar, masked by a fork of the matcher that took them; for as
// long as the drafts before it are confirmed. Returns how many leading samples hold.
size_t EngineImpl::resample_after_drafts(const ScheduledChunk& c, std::vector<SampleOutput>& samples,
                                         std::span<const std::vector<float>> raw_logits) const {
    const Sequence& s = *c.seq;
    std::span<const int32_t> prompt(s.tokens.data(), s.prompt_len);
    std::vector<int32_t> history(s.tokens.begin() + s.prompt_len, s.tokens.end());
    grammar::GrammarMatcher* matcher = nullptr;  // row 0's mask is done: the service is off it
    std::vector<uint32_t> words;
    std::vector<float> masked;
    if (SequenceGrammar* g = c.seq->grammar.get()) {
        if (g->draft_matcher) *g->draft_matcher = *g->matcher;  // the same grammar: keeps its scratch
        else g->draft_matcher = std::make_unique<grammar::GrammarMatcher>(*g->matcher);
        matcher = g->draft_matcher.get();
        words.resize(static_cast<size_t>(grammar_->mask_words()));
    }
    size_t i = 1;
    for (; i < samples.size() && i <= raw_logits.size(); ++i) {
        if (samples[i - 1].token != c.draft[i - 1] && !config_.speculative.test_accept_unchecked) break;
        history.push_back(c.draft[i - 1]);
        std::span<const float> logits = raw_logits[i - 1];
        if (matcher) {
            // A terminated matcher allows nothing: the sequence ends at the draft that ended it.
            if (!matcher->accept_token(c.draft[i - 1]) || matcher->is_terminated()) break;
            matcher->fill_next_token_bitmask(words.data());
            masked.assign(logits.begin(), logits.end());
            apply_token_mask_on_host(masked.data(), static_cast<int64_t>(masked.size()), words.data());
            logits = masked;
        }
        samples[i] = sample_token({logits, &s.request->request.sampling, s.seed, static_cast<int64_t>(s.tokens.size() + i),
                                   prompt, history});
    }
    return i;
}

void EngineImpl::commit_verified(const ScheduledChunk& c, std::vector<SampleOutput>& samples,
                                 std::span<const std::vector<float>> raw_logits, int64_t& detokenize_us) {
    Sequence& s = *c.seq;
    const size_t drafts = c.draft.size();
    size_t kept = 0;
    const bool on_host = host_samples_after_drafts(c);
    if (!samples.empty()) {
        size_t valid = on_host ? resample_after_drafts(c, samples, raw_logits) : samples.size();
        if (config_.speculative.test_accept_unchecked) kept = std::min(drafts, valid - 1);
        else if (drafts_have_distribution(c)) kept = verify_with_distribution(c, samples, raw_logits);
        else
            while (kept < drafts && kept + 1 < valid && samples[kept].token == c.draft[kept]) ++kept;
        // A draft model's drafts from a context that just restarted (after a rest) are kept far
        // less often than usual; counting them would make drafting look worse than it is.
        bool cold = verifies_model_draft(c) && c.start - s.draft_context_from < kWarmContext;
        if (!cold) acceptance_.record(static_cast<int>(drafts), static_cast<int>(kept));
    }
    s.num_computed += static_cast<int64_t>(kept) + 1;  // the sequence's last token and the kept drafts
    record_verification(drafts, kept);
    for (size_t i = 0; i < samples.size() && i <= kept && !s.finished(); ++i) {
        if (i < kept) samples[i].token = c.draft[i];  // the same token, unless kept unchecked (tests)
        append_token(s, std::move(samples[i]), detokenize_us);
    }
    // The penalty row counted only the first sample: rewritten from the tokens when it next samples.
    if (on_host && kept > 0 && needs_penalty_state(s.request->request.sampling)) penalty_slots_->release(&s);
}

// Deterministic requests keep the point-mass rule: which positions a verification covers depends
// on the batch (token budget, planner), and under the general rule so would their tokens. So do
// requests with penalties or a grammar: the general rule would need every draft position's
// penalized and masked row.
bool EngineImpl::drafts_have_distribution(const ScheduledChunk& c) const {
    const Sequence& s = *c.seq;
    return !c.draft.empty() && !s.deterministic && !host_samples_after_drafts(c) && s.drafted_for == static_cast<int64_t>(s.tokens.size()) &&
           s.model_draft_logits.size() >= c.draft.size();
}

// The rejection rule (speculative/rejection.h) on the target's raw rows: the kept drafts and the
// token after them replace the device's samples (and their logprobs) where they differ.
size_t EngineImpl::verify_with_distribution(const ScheduledChunk& c, std::vector<SampleOutput>& samples,
                                            std::span<const std::vector<float>> raw_logits) const {
    const Sequence& s = *c.seq;
    const SamplingParams& p = s.request->request.sampling;
    std::vector<std::span<const float>> target, draft;
    std::vector<kernels::SampleRow> rows;
    for (size_t i = 0; i < c.draft.size(); ++i) {
        target.emplace_back(raw_logits[i]);
        draft.emplace_back(s.model_draft_logits[i]);
        rows.push_back(sample_row_of(p, s.seed, static_cast<int64_t>(s.tokens.size() + i)));
    }
    std::vector<kernels::LogitBias> bias;
    for (const auto& [token, b] : p.logit_bias) bias.push_back({token, b});
    DraftVerdict v = verify_draft_distribution(target, draft, c.draft, rows, bias);
    auto host_output = [&](size_t i, int32_t token) {
        kernels::cpu::SampledToken t{token};
        if (p.logprobs >= 0) kernels::cpu::fill_logprobs(raw_logits[i], p.logprobs, t);
        SampleOutput out{t.token, t.logprob, {}};
        for (const auto& [id, lp] : t.top) out.top.push_back({id, lp});
        return out;
    };
    for (size_t i = 0; i < v.kept; ++i) samples[i] = host_output(i, c.draft[i]);
    if (v.kept < c.draft.size()) samples[v.kept] = host_output(v.kept, v.token);
    return v.kept;  // all kept: the device's sample after the last draft is the next token
}

void EngineImpl::record_verification(size_t drafts, size_t kept) {
    {
        std::lock_guard<std::mutex> lock(stats_mutex_);
        SpeculativeStats& st = stats_.speculative;
        ++st.verifications;
        st.draft_tokens += static_cast<int64_t>(drafts);
        st.accepted_tokens += static_cast<int64_t>(kept);
        if (st.proposed_at.size() < drafts) st.proposed_at.resize(drafts), st.accepted_at.resize(drafts);
        for (size_t i = 0; i < drafts; ++i) st.proposed_at[i] += 1;
        for (size_t i = 0; i < kept; ++i) st.accepted_at[i] += 1;
    }
    if (trace_.enabled()) trace_.counter("drafts kept", static_cast<double>(kept));
}

// How many tokens the draft model proposes for `sequences` anchors after `plan`. Under confidence
// scheduling: the length with the most expected tokens per second of the next step plus its
// drafting (both measured; the kept share per position from the verifications so far), and at
// most one more than the longest draft the plan verified (the planner's capacity of one step
// before, as DSpark schedules capacity from old confidences). After kRestAfter choices of 0 in a
// row (drafting does not pay, say under heavy load) kRest: the draft model rests until a length
// pays against not drafting at all. Else num_draft_tokens.
int EngineImpl::draft_length(const StepPlan& plan, size_t sequences) {
    int most = config_.speculative.num_draft_tokens;
    if (const auto& forced = config_.speculative.test_draft_lengths; !forced.empty())
        return forced[static_cast<size_t>(draft_choices_++ % static_cast<int64_t>(forced.size()))];
    if (config_.speculative.verify != "confidence") return most;
    size_t verified = 0;
    bool drafted = false;
    for (const ScheduledChunk& c : plan.chunks) {
        verified = std::max(verified, c.draft.size());
        drafted = drafted || verifies_model_draft(c);
    }
    if (drafted) most = std::min(most, static_cast<int>(verified) + 1);
    std::vector<double> kept(static_cast<size_t>(most));
    for (int j = 0; j < most; ++j) kept[j] = acceptance_.confidence(j);
    int length = plan_draft_length(kept, static_cast<int64_t>(sequences), step_cost_, draft_cost_, draft_resting_);
    if (draft_resting_) {
        // Seldom exploring while resting (a draft then starts from a lapsed context), only so that
        // the step costs of drafting stay measured: a stale one, say from the first cold steps,
        // could keep the model resting for good.
        if (length == 0 && ++draft_choices_ % (kExploreEvery * kRestExploreFactor) != 0) return kRest;
        if (length == 0) return 1 + static_cast<int>((draft_choices_ / (kExploreEvery * kRestExploreFactor)) % most);
        draft_resting_ = false, zero_lengths_ = 0;
    } else if (length == 0 && ++zero_lengths_ >= kRestAfter) {
        draft_resting_ = true;
        return kRest;
    } else if (length > 0) {
        zero_lengths_ = 0;
    }
    // Now and then each other length in turn, so that the costs of lengths not chosen stay measured
    // (a stale estimate, say from the first cold steps, would otherwise never be corrected).
    if (++draft_choices_ % kExploreEvery == 0) length = static_cast<int>((draft_choices_ / kExploreEvery) % (most + 1));
    if (trace_.enabled()) trace_.counter("draft length", length);
    return length;
}

// A draft model (DSpark, MTP), after a step: the features of the positions each speculating
// sequence just committed join the draft's context, then every sequence about to decode gets a
// draft from its last token. A sequence whose context has a gap (admitted with a cached prefix,
// features trimmed by bounded replay, a new cache state) drafts from what it has since.
double EngineImpl::draft_with_model(const StepPlan& plan, const model::StepFeatures& features) {
    std::vector<model::DraftCommit> commits;
    for (size_t i = 0; i < plan.chunks.size() && i < features.seqs.size(); ++i) {
        const ScheduledChunk& c = plan.chunks[i];
        Sequence& s = *c.seq;
        if (!s.speculative || s.cache_state < 0) continue;
        if (s.cache_state != s.draft_state || c.start != s.draft_context_end) {
            s.draft_state = s.cache_state;
            s.draft_context_from = c.start;
        }
        const kernels::SeqSlice& f = features.seqs[i];
        int64_t begin = std::max(c.start, f.start_pos), end = std::min(s.num_computed, f.start_pos + f.num_tokens);
        // Features of a chunk's last positions only (the draft's window; bounded replay's tail).
        if (f.start_pos > c.start)
            s.draft_context_from = std::max(s.draft_context_from, std::min(f.start_pos, s.num_computed));
        s.draft_context_end = s.num_computed;
        if (end <= begin || end >= static_cast<int64_t>(s.tokens.size())) continue;
        model::DraftCommit& dc = commits.emplace_back();
        dc.rows = {f.token_begin + static_cast<int32_t>(begin - f.start_pos), static_cast<int32_t>(end - begin), begin,
                   s.cache_state, s.draft_context_from};
        dc.next_tokens.assign(s.tokens.begin() + begin + 1, s.tokens.begin() + end + 1);
    }
    std::vector<model::DraftAnchor> anchors;
    std::vector<Sequence*> drafting;
    for (const ScheduledChunk& c : plan.chunks) {
        Sequence& s = *c.seq;
        int64_t position = static_cast<int64_t>(s.tokens.size()) - 1;
        bool committed = std::any_of(commits.begin(), commits.end(), [&](const model::DraftCommit& dc) {
            return dc.rows.state_idx == s.cache_state && dc.rows.start_pos + dc.rows.num_tokens == position;
        });
        if (!s.speculative || s.finished() || s.request->cancelled || s.cache_state != s.draft_state ||
            position != s.num_computed || !committed)
            continue;
        const SamplingParams& p = s.request->request.sampling;
        anchors.push_back({s.cache_state, s.tokens.back(), position, s.draft_context_from,
                           sample_row_of(p, s.seed ^ kDraftSeedSalt, 0)});
        drafting.push_back(&s);
    }
    int length = draft_length(plan, anchors.size());
    if (length == kRest) {
        // The draft context of every sequence whose commits the resting model skips restarts from
        // its next commit once drafting resumes.
        for (const ScheduledChunk& c : plan.chunks) c.seq->draft_context_end = -1;
        return 0.0;
    }
    size_t committed = 0;
    for (const model::DraftCommit& dc : commits) committed += static_cast<size_t>(dc.rows.num_tokens);
    auto start = std::chrono::steady_clock::now();
    std::vector<model::DraftProposal> proposals;
    {
        TraceRecorder::Scope span(&trace_, "draft",
                                  trace_.enabled() ? nlohmann::json{{"sequences", anchors.size()}, {"length", length},
                                                                    {"committed", committed}}
                                                   : nullptr);
        proposals = draft_model_->draft(features, commits, anchors, length, *cache_);
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Only calls that took in decode commits (each sequence's kept drafts and one more) price a
    // length: a prompt's rows through the draft cost what its length says, not the draft length.
    size_t per_sequence = static_cast<size_t>(config_.speculative.num_draft_tokens) + 1;
    if (!anchors.empty() && committed <= anchors.size() * per_sequence) draft_cost_.record(length, static_cast<int64_t>(anchors.size()), seconds);
    for (size_t k = 0; k < drafting.size(); ++k) {
        drafting[k]->model_draft = std::move(proposals[k].tokens);
        drafting[k]->model_confidence = std::move(proposals[k].confidence);
        drafting[k]->model_draft_logits = std::move(proposals[k].logits);
        drafting[k]->drafted_for = static_cast<int64_t>(drafting[k]->tokens.size());
    }
    return seconds;
}

}  // namespace deepinfer::runtime
