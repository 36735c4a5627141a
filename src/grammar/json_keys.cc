#include "grammar/json_keys.h"

#include <map>

#include "grammar/determinize.h"

namespace deepinfer::grammar {

namespace {

struct TrieNode {
    std::map<uint8_t, int32_t> children;
    bool name_ends = false;
    int32_t char_state;  // position inside the current character (key_char's start at a boundary)
};

}  // namespace

std::optional<Dfa> keys_except(const Dfa& key_char, const std::vector<std::string>& names) {
    std::vector<TrieNode> trie{{{}, false, key_char.start}};
    std::vector<ByteSet> sets(key_char.num_classes);
    for (int b = 0; b < 256; ++b) sets[key_char.byte_class[b]].add(static_cast<uint8_t>(b));
    sets.push_back(ByteSet::of('"'));
    for (const std::string& name : names) {
        int32_t t = 0;
        for (char ch : name) {
            uint8_t b = static_cast<uint8_t>(ch);
            if (b < 0x20 || b == '"' || b == '\\') return std::nullopt;
            sets.push_back(ByteSet::of(b));
            auto [it, added] = trie[t].children.emplace(b, static_cast<int32_t>(trie.size()));
            if (added) {
                int32_t u = key_char.step(trie[t].char_state, b);
                if (u == Dfa::kDead) return std::nullopt;  // not canonical UTF-8: let the product decide
                trie.push_back({{}, false, key_char.accepting[u] ? key_char.start : u});
            }
            t = it->second;
        }
        trie[t].name_ends = true;
    }
    ByteClasses classes = ByteClasses::partition(sets);
    std::vector<uint8_t> representative(classes.count);
    for (int b = 255; b >= 0; --b) representative[classes.of_byte[b]] = static_cast<uint8_t>(b);
    // States: 0 before the opening quote, then the trie nodes, then key_char's states off the
    // trie ("free": the key has left every name), then the final state after the closing quote.
    int32_t num_trie = static_cast<int32_t>(trie.size()), first_free = 1 + num_trie;
    int32_t final_state = first_free + key_char.num_states();
    Dfa out;
    out.byte_class = classes.of_byte;
    out.num_classes = classes.count;
    out.next.assign(size_t(final_state + 1) * classes.count, Dfa::kDead);
    out.accepting.assign(final_state + 1, 0);
    out.accepting[final_state] = 1;
    auto free_step = [&](int32_t u, uint8_t b, bool is_a_name) {
        if (u == key_char.start && b == '"') return is_a_name ? Dfa::kDead : final_state;
        int32_t next = key_char.step(u, b);
        if (next == Dfa::kDead) return Dfa::kDead;
        return first_free + (key_char.accepting[next] ? key_char.start : next);
    };
    for (int32_t c = 0; c < classes.count; ++c) {
        uint8_t b = representative[c];
        auto set = [&](int32_t from, int32_t to) { out.next[size_t(from) * classes.count + c] = to; };
        if (b == '"') set(0, 1);
        for (int32_t t = 0; t < num_trie; ++t) {
            auto child = trie[t].children.find(b);
            set(1 + t, child != trie[t].children.end() ? 1 + child->second : free_step(trie[t].char_state, b, trie[t].name_ends));
        }
        for (int32_t u = 0; u < key_char.num_states(); ++u)
            if (!key_char.accepting[u]) set(first_free + u, free_step(u, b, false));
    }
    out.start = 0;
    return dfa_trim(out);
}

}  // namespace deepinfer::grammar
