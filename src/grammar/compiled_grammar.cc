#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <map>
#include <unordered_set>

namespace deepinfer::grammar {

CompiledGrammar::CompiledGrammar(Pda pda, std::shared_ptr<const Vocabulary> vocabulary)
    : pda_(std::move(pda)), vocabulary_(std::move(vocabulary)), slice_fit_(new std::atomic<int32_t>[pda_.num_states()]),
      ascii_loop_(new std::atomic<uint64_t>[3 * size_t(pda_.num_states())]) {
    for (int32_t s = 0; s < pda_.num_states(); ++s) {
        slice_fit_[s].store(kUnknown, std::memory_order_relaxed);
        ascii_loop_[3 * size_t(s) + 2].store(0, std::memory_order_relaxed);
    }
    for (const VocabularySlice& slice : vocabulary_->slices()) {
        std::map<std::pair<int32_t, int32_t>, uint8_t> joint;
        SliceClasses classes;
        for (int b = 0; b < 256; ++b) {
            auto key = std::make_pair<int32_t, int32_t>(slice.one_char.byte_class[b], pda_.byte_class()[b]);
            if (joint.emplace(key, uint8_t(b)).second) classes.representative.push_back(uint8_t(b));
        }
        slice_classes_.push_back(std::move(classes));
    }
}

CompiledGrammar::SliceFit CompiledGrammar::slice_fit(int32_t state) const {
    int32_t packed = slice_fit_[state].load(std::memory_order_relaxed);
    if (packed == kUnknown) {
        SliceFit best;
        for (int32_t k = 0; k < static_cast<int32_t>(vocabulary_->slices().size()); ++k) {
            SliceFit f = fit(state, k);
            if (f.usable() && f.chars > best.chars) best = f;
        }
        packed = best.slice < 0 ? -1 : (best.slice * 64 + best.chars) * 2 + best.exact;
        slice_fit_[state].store(packed, std::memory_order_relaxed);
    }
    if (packed < 0) return {};
    return {packed / 128, (packed / 2) % 64, (packed & 1) != 0};
}

CompiledGrammar::AsciiLoop CompiledGrammar::ascii_loop(int32_t state) const {
    std::atomic<uint64_t>* slot = &ascii_loop_[3 * size_t(state)];
    if (uint64_t flags = slot[2].load(std::memory_order_acquire))
        return {{slot[0].load(std::memory_order_relaxed), slot[1].load(std::memory_order_relaxed)}, (flags & 2) != 0};
    AsciiLoop loop = compute_ascii_loop(state);
    slot[0].store(loop.bytes[0], std::memory_order_relaxed);
    slot[1].store(loop.bytes[1], std::memory_order_relaxed);
    slot[2].store(loop.non_ascii ? 3 : 1, std::memory_order_release);
    return loop;
}

CompiledGrammar::AsciiLoop CompiledGrammar::compute_ascii_loop(int32_t state) const {
    AsciiLoop loop{{0, 0}, false};
    const int32_t* row = pda_.row(state);
    for (int b = 0; b < 128; ++b)
        if (row[pda_.byte_class()[b]] == state) loop.bytes[b >> 6] |= uint64_t{1} << (b & 63);
    loop.non_ascii = (loop.bytes[0] | loop.bytes[1]) != 0 && loops_on_non_ascii(state);
    return loop;
}

// Every multi-byte character leads from `state` back to it: walk (position in a character, state)
// pairs over every byte, failing on a dead step or a character that ends elsewhere.
bool CompiledGrammar::loops_on_non_ascii(int32_t state) const {
    const Dfa& one = vocabulary_->non_ascii_char();
    std::vector<std::pair<int32_t, int32_t>> todo{{one.start, state}}, seen = todo;
    while (!todo.empty()) {
        auto [u, q] = todo.back();
        todo.pop_back();
        for (int b = 0x80; b < 256; ++b) {
            int32_t u2 = one.step(u, uint8_t(b));
            if (u2 == Dfa::kDead) continue;
            int32_t q2 = pda_.step(q, uint8_t(b));
            if (q2 == Pda::kDead || (one.accepting[u2] && q2 != state)) return false;
            if (one.accepting[u2]) continue;
            std::pair<int32_t, int32_t> next{u2, q2};
            if (std::find(seen.begin(), seen.end(), next) == seen.end()) seen.push_back(next), todo.push_back(next);
            if (seen.size() > 64) return false;
        }
    }
    return true;
}

// Reads the slice's characters one at a time from the states reached so far, for up to kMaxChars
// characters, and stops at the first length at which some character kills some state. A state is
// expanded once, when first reached: once no new state appears, nothing can die later.
CompiledGrammar::SliceFit CompiledGrammar::fit(int32_t state, int32_t slice) const {
    const Dfa& one = vocabulary_->slices()[slice].one_char;
    const auto& reps = slice_classes_[slice].representative;
    std::unordered_set<int32_t> seen{state};
    std::vector<int32_t> level{state}, next, fresh;
    std::vector<std::pair<int32_t, int32_t>> todo, inside;
    bool level_all_fresh = true;
    for (int32_t chars = 0; chars < VocabularySlice::kMaxChars; ++chars) {
        next.clear();
        bool died = false;
        for (int32_t start : level) {
            todo.assign(1, {one.start, start});
            inside.clear();
            while (!todo.empty()) {
                auto [u, q] = todo.back();
                todo.pop_back();
                for (uint8_t b : reps) {
                    int32_t u2 = one.step(u, b);
                    if (u2 == Dfa::kDead) continue;
                    int32_t q2 = pda_.step(q, b);
                    if (q2 == Pda::kDead) died = true;
                    else if (one.accepting[u2]) next.push_back(q2);
                    else if (std::find(inside.begin(), inside.end(), std::make_pair(u2, q2)) == inside.end())
                        inside.emplace_back(u2, q2), todo.emplace_back(u2, q2);
                }
            }
        }
        if (died) return {slice, chars, next.empty() && level_all_fresh};
        std::sort(next.begin(), next.end());
        next.erase(std::unique(next.begin(), next.end()), next.end());
        fresh.clear();
        for (int32_t q : next)
            if (seen.insert(q).second) fresh.push_back(q);
        if (fresh.empty()) break;
        level_all_fresh = fresh.size() == next.size();
        level.swap(fresh);
    }
    return {slice, VocabularySlice::kMaxChars, false};
}

}  // namespace deepinfer::grammar
