#include "grammar/matcher.h"

#include <algorithm>
#include <cstring>

namespace deepinfer::grammar {

// Buffers reused across calls so the hot paths do not allocate. Not copied with the matcher.
struct GrammarMatcher::Scratch {
    explicit Scratch(const Pda& pda) : stepper(pda) {}
    PdaStepper stepper;
    StackPool pool;
    std::vector<Config> configs, next, walk;
    std::vector<size_t> level_begin, pool_mark;  // per trie depth
    int64_t nodes_walked = 0;                     // trie nodes stepped through by the current mask
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, int32_t max_rollback_tokens)
    : grammar_(std::move(grammar)), max_rollback_(max_rollback_tokens) {
    reset();
}

GrammarMatcher::GrammarMatcher(const GrammarMatcher& other)
    : grammar_(other.grammar_), max_rollback_(other.max_rollback_), current_(other.current_),
      terminated_(other.terminated_), history_(other.history_) {}

GrammarMatcher& GrammarMatcher::operator=(const GrammarMatcher& other) {
    if (this != &other) {
        if (grammar_ != other.grammar_) scratch_.reset();
        grammar_ = other.grammar_;
        max_rollback_ = other.max_rollback_;
        current_ = other.current_;
        terminated_ = other.terminated_;
        history_ = other.history_;
    }
    return *this;
}

GrammarMatcher::~GrammarMatcher() = default;

GrammarMatcher::Scratch& GrammarMatcher::scratch() {
    if (!scratch_) scratch_ = std::make_unique<Scratch>(grammar_->pda());
    return *scratch_;
}

void GrammarMatcher::reset() {
    current_.clear();
    history_.clear();
    terminated_ = false;
    if (grammar_->accepts_nothing()) return;
    StackPool pool;
    current_.add({grammar_->pda().start(), -1}, pool);
}

std::vector<Config>& GrammarMatcher::load_current() {
    Scratch& s = scratch();
    s.pool.clear();
    s.configs.clear();
    current_.load(s.pool, s.configs);
    return s.configs;
}

bool GrammarMatcher::advance(std::string_view bytes, std::vector<Config>& configs) {
    Scratch& s = scratch();
    for (char c : bytes) {
        s.next.clear();
        s.stepper.step(configs, static_cast<uint8_t>(c), s.pool, s.next);
        if (s.next.empty()) return false;
        configs.swap(s.next);
    }
    return true;
}

void GrammarMatcher::commit(const std::vector<Config>& configs, bool terminated) {
    history_.push_back({std::move(current_), terminated_});
    if (max_rollback_ >= 0)
        while (static_cast<int32_t>(history_.size()) > max_rollback_) history_.pop_front();
    current_.clear();
    for (const Config& c : configs) current_.add(c, scratch().pool);
    terminated_ = terminated;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
    if (terminated_ || current_.empty()) return false;
    std::vector<Config>& configs = load_current();
    if (!advance(bytes, configs)) return false;
    commit(configs, false);
    return true;
}

bool GrammarMatcher::accept_token(int32_t id) {
    const Vocabulary& vocab = grammar_->vocabulary();
    if (terminated_ || id < 0 || id >= vocab.size()) return false;
    if (vocab.is_eos(id)) {
        if (!can_terminate()) return false;
        std::vector<Config> same;
        scratch().pool.clear();
        current_.load(scratch().pool, same);
        commit(same, true);
        return true;
    }
    if (vocab.is_special(id) || vocab.token_bytes(id).empty()) return false;
    return accept_bytes(vocab.token_bytes(id));
}

bool GrammarMatcher::can_terminate() {
    if (terminated_ || current_.empty()) return false;
    std::vector<Config>& configs = load_current();
    return scratch().stepper.can_end(configs, scratch().pool);
}

bool GrammarMatcher::rollback(int32_t num_tokens) {
    if (num_tokens < 0 || num_tokens > static_cast<int32_t>(history_.size())) return false;
    if (num_tokens == 0) return true;
    Snapshot& target = history_[history_.size() - num_tokens];
    current_ = std::move(target.stacks);
    terminated_ = target.terminated;
    history_.resize(history_.size() - num_tokens);
    return true;
}

std::string GrammarMatcher::forced_bytes(size_t max_bytes) {
    std::string out;
    if (terminated_ || current_.empty()) return out;
    Scratch& s = scratch();
    std::vector<Config>& configs = load_current();
    while (out.size() < max_bytes) {
        if (s.stepper.can_end(configs, s.pool)) break;
        ByteSet next = s.stepper.next_bytes(configs, s.pool);
        if (next.count() != 1) break;
        uint8_t b = static_cast<uint8_t>(next.first());
        out.push_back(static_cast<char>(b));
        s.next.clear();
        s.stepper.step(configs, b, s.pool, s.next);
        configs.swap(s.next);
    }
    return out;
}

std::vector<int32_t> GrammarMatcher::forced_tokens(size_t max_bytes) {
    std::string forced = forced_bytes(max_bytes);
    const TokenTrie& trie = grammar_->vocabulary().trie();
    auto nodes = trie.nodes();
    auto child_of = [&](int32_t node, uint8_t b) {
        for (int32_t c = node + 1; c < nodes[node].skip; c = nodes[c].skip)
            if (nodes[c].byte == b) return c;
        return -1;
    };
    // Longest match first.
    std::vector<int32_t> out;
    std::vector<size_t> starts;
    for (size_t pos = 0; pos < forced.size();) {
        int32_t node = 0, best = -1;
        size_t best_end = pos;
        for (size_t k = pos; k < forced.size() && (node = child_of(node, static_cast<uint8_t>(forced[k]))) >= 0; ++k)
            if (nodes[node].num_tokens) best = node, best_end = k + 1;
        if (best < 0) break;
        out.push_back(trie.token_ids()[nodes[best].first_token]);
        starts.push_back(pos);
        pos = best_end;
    }
    // Drop the tail a longer token could cover: one that starts where a kept token starts and
    // runs on past the forced bytes.
    auto runs_past_end = [&](size_t pos) {
        int32_t node = 0;
        for (size_t k = pos; k < forced.size(); ++k)
            if ((node = child_of(node, static_cast<uint8_t>(forced[k]))) < 0) return false;
        return nodes[node].skip - node > 1;
    };
    while (!starts.empty() && runs_past_end(starts.back())) out.pop_back(), starts.pop_back();
    return out;
}

void GrammarMatcher::fill_next_token_bitmask(uint32_t* words) {
    const Vocabulary& vocab = grammar_->vocabulary();
    std::memset(words, 0, sizeof(uint32_t) * vocab.mask_words());
    if (terminated_ || current_.empty()) return;
    MaskCache& cache = grammar_->mask_cache();
    if (cache.lookup(current_.data(), words, vocab.mask_words())) return;
    Scratch& s = scratch();
    s.nodes_walked = 0;
    compute_mask(words);
    // Cheap masks are not worth the memory; long walks are remembered for the next visit.
    constexpr int64_t kWorthCaching = 2048;
    if (s.nodes_walked >= kWorthCaching) cache.store(current_.data(), words, vocab.mask_words());
}

void GrammarMatcher::compute_mask(uint32_t* words) {
    const Vocabulary& vocab = grammar_->vocabulary();
    Scratch& s = scratch();
    std::vector<Config>& configs = load_current();
    if (s.stepper.can_end(configs, s.pool))
        for (int32_t id : vocab.eos_ids()) words[id >> 5] |= 1u << (id & 31);
    // Where one configuration allows the slice tokens of up to n characters by itself, they are
    // set at once; the rest trie holds every other token, walked with all configurations. Slice
    // tokens longer than n may still suit another configuration, which then walks the full trie.
    CompiledGrammar::SliceFit best;
    size_t best_index = 0;
    for (size_t i = 0; i < configs.size(); ++i) {
        CompiledGrammar::SliceFit f = grammar_->slice_fit(configs[i].state);
        if (f.usable() && f.chars > best.chars) best = f, best_index = i;
    }
    if (best.slice < 0) {
        walk_trie(vocab.trie(), configs, words);
        return;
    }
    const VocabularySlice& slice = vocab.slices()[best.slice];
    const std::vector<uint32_t>& members = slice.up_to[best.chars - 1];
    for (int32_t i = 0; i < vocab.mask_words(); ++i) words[i] |= members[i];
    std::vector<Config> roots = configs;
    walk_trie(slice.rest, roots, words);
    if (best.chars < VocabularySlice::kMaxChars && roots.size() > 1) {
        roots.erase(roots.begin() + static_cast<std::ptrdiff_t>(best_index));
        walk_trie(vocab.trie(), roots, words);
    }
}

// A configuration loops on every byte below this trie node, so it allows every token below: no
// need to walk there.
bool GrammarMatcher::loops_below(const TokenTrie& trie, int32_t node, const Config* configs, size_t count) const {
    const SubtreeBytes& below = trie.subtree_bytes(node);
    if (!below.utf8) return false;
    for (size_t k = 0; k < count; ++k) {
        CompiledGrammar::AsciiLoop loop = grammar_->ascii_loop(configs[k].state);
        if ((below.ascii[0] & ~loop.bytes[0]) == 0 && (below.ascii[1] & ~loop.bytes[1]) == 0 &&
            (!below.non_ascii || loop.non_ascii))
            return true;
    }
    return false;
}

// Depth-first walk over the token trie, stepping the configurations one byte per trie edge and
// skipping every subtree whose prefix no configuration accepts. Level d of the walk holds the
// configurations after the first d bytes of the current node's token.
void GrammarMatcher::walk_trie(const TokenTrie& trie, std::span<const Config> roots, uint32_t* words) {
    Scratch& s = scratch();
    const Pda& pda = grammar_->pda();
    auto nodes = trie.nodes();
    auto ids = trie.token_ids();
    std::vector<Config>& levels = s.walk;  // level d: levels[level_begin[d], level_begin[d + 1])
    levels.assign(roots.begin(), roots.end());
    s.level_begin.assign(trie.max_depth() + 2, 0);
    s.pool_mark.assign(trie.max_depth() + 2, 0);
    s.level_begin[1] = levels.size();
    s.pool_mark[1] = s.pool.size();
    levels.resize(levels.size() + 64);
    size_t i = 1;
    while (i < nodes.size()) {
        ++s.nodes_walked;
        const TrieNode& node = nodes[i];
        int32_t d = node.depth;
        size_t parent_begin = s.level_begin[d - 1], parent_end = s.level_begin[d], end = parent_end;
        if (node.skip - i > 1 && loops_below(trie, static_cast<int32_t>(i), levels.data() + parent_begin, parent_end - parent_begin)) {
            for (int32_t k = trie.subtree_tokens(static_cast<int32_t>(i)), e = trie.subtree_tokens(node.skip); k < e; ++k)
                words[ids[k] >> 5] |= 1u << (ids[k] & 31);
            i = node.skip;
            continue;
        }
        const Config& only = levels[parent_begin];
        if (parent_end - parent_begin == 1 && !s.stepper.needs_expansion(only)) {
            // The common case: one configuration moving inside its own DFA.
            int32_t t = pda.step(only.state, node.byte);
            if (t == Pda::kDead) {
                i = node.skip;
                continue;
            }
            levels[end++] = {t, only.parent};
        } else {
            s.pool.truncate(s.pool_mark[d]);
            s.next.clear();
            s.stepper.step(std::span<const Config>(levels.data() + parent_begin, parent_end - parent_begin), node.byte,
                           s.pool, s.next);
            if (s.next.empty()) {
                i = node.skip;
                continue;
            }
            for (const Config& c : s.next) levels[end++] = c;
        }
        s.level_begin[d + 1] = end;
        s.pool_mark[d + 1] = s.pool.size();
        if (levels.size() < end + 64) levels.resize(2 * (end + 64));
        for (int32_t k = 0; k < node.num_tokens; ++k) {
            int32_t id = ids[node.first_token + k];
            words[id >> 5] |= 1u << (id & 31);
        }
        ++i;
    }
}

}  // namespace deepinfer::grammar

namespace deepinfer::grammar {

std::string GrammarMatcher::describe_state() const {
    const Pda& pda = grammar_->pda();
    std::string out;
    const auto& data = current_.data();
    for (size_t i = 0; i < data.size(); i += 1 + data[i]) {
        out += out.empty() ? "[" : " [";
        for (int32_t k = 0; k < data[i]; ++k) {
            int32_t s = data[i + 1 + k];
            out += (k ? " > " : "") + pda.rule_name(pda.rule_of(s)) + ":" + std::to_string(s);
        }
        int32_t top = data[i + data[i]];
        std::string loop;
        for (int b = 32; b < 127; ++b)
            if (pda.step(top, uint8_t(b)) == top) loop.push_back(char(b));
        if (!loop.empty()) out += " loop{" + loop + "}";
        out += grammar_->slice_fit(top).usable() ? " (slice " + std::to_string(grammar_->slice_fit(top).chars) + ")]" : "]";
    }
    return out;
}

}  // namespace deepinfer::grammar
