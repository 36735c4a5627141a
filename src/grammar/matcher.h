#pragma once
// Per-sequence state of constrained decoding over one compiled grammar. The engine keeps one
// matcher per sequence: fill_next_token_bitmask() before sampling (it may run on a CPU thread
// while the GPU computes the step), accept_token() after. rollback() undoes accepted tokens for
// speculative verification; copying a matcher forks it (the copy owns its own state and scratch;
// the compiled grammar stays shared). One matcher must not be used by two threads at once.
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/pda_step.h"
#include "grammar/stacks.h"

namespace deepinfer::grammar {

class GrammarMatcher {
public:
    static constexpr int32_t kUnlimitedRollback = -1;

    // max_rollback_tokens bounds how many accepted tokens rollback() can undo (older history is
    // dropped); kUnlimitedRollback keeps it all.
    explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, int32_t max_rollback_tokens = kUnlimitedRollback);
    GrammarMatcher(const GrammarMatcher& other);
    GrammarMatcher& operator=(const GrammarMatcher& other);
    GrammarMatcher(GrammarMatcher&&) noexcept = default;
    GrammarMatcher& operator=(GrammarMatcher&&) noexcept = default;
    ~GrammarMatcher();

    // Advances by one token; false (and no change) when the grammar does not allow it. An EOS id
    // is accepted only where the grammar can end, and terminates the matcher.
    bool accept_token(int32_t id);
    // Advances by raw bytes as one step (for tests and for forced bytes); false and no change if
    // they are not allowed.
    bool accept_bytes(std::string_view bytes);
    // words[i / 32] bit (i % 32) set = token i allowed. `words` has vocabulary().mask_words()
    // entries. Once terminated, nothing is allowed.
    void fill_next_token_bitmask(uint32_t* words);
    // Undoes the last num_tokens accepted steps; false (and no change) if fewer are recorded.
    bool rollback(int32_t num_tokens);
    // The longest byte string every allowed continuation starts with (empty when there is a
    // choice or the output may end here), up to max_bytes. The engine can tokenize it and feed
    // the tokens without running the model.
    std::string forced_bytes(size_t max_bytes = 256);
    // forced_bytes() cut into vocabulary tokens, longest match first, without the tail that a longer
    // token could cover differently (a token that starts where a forced token starts and runs past
    // the forced bytes may be the model's choice). Accepting them in order is always allowed. The
    // split is greedy, not the tokenizer's; an engine may prefer to tokenize forced_bytes() itself.
    std::vector<int32_t> forced_tokens(size_t max_bytes = 256);
    bool can_terminate();
    bool is_terminated() const { return terminated_; }
    void reset();

    // The current stacks as rule:state chains, for debugging.
    std::string describe_state() const;
    int32_t num_rollback_steps() const { return static_cast<int32_t>(history_.size()); }
    const CompiledGrammar& grammar() const { return *grammar_; }

private:
    struct Snapshot {
        StackSet stacks;
        bool terminated;
    };
    struct Scratch;

    Scratch& scratch();
    // Loads the current stacks into the scratch pool as level-0 configurations.
    std::vector<Config>& load_current();
    bool advance(std::string_view bytes, std::vector<Config>& configs);
    void commit(const std::vector<Config>& configs, bool terminated);
    void compute_mask(uint32_t* words);
    void walk_trie(const TokenTrie& trie, std::span<const Config> roots, uint32_t* words);
    bool loops_below(const TokenTrie& trie, int32_t node, const Config* configs, size_t count) const;

    std::shared_ptr<const CompiledGrammar> grammar_;
    int32_t max_rollback_;
    StackSet current_;
    bool terminated_ = false;
    std::deque<Snapshot> history_;
    std::unique_ptr<Scratch> scratch_;
};

}  // namespace deepinfer::grammar
