#include "grammar/dfa.h"

#include "grammar/grammar_error.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace deepinfer::grammar {

bool Dfa::matches(std::string_view text) const {
    int32_t s = start;
    for (char c : text) {
        if (s == kDead) return false;
        s = step(s, static_cast<uint8_t>(c));
    }
    return s != kDead && accepting[s];
}

bool Dfa::language_is_empty() const {
    if (num_states() == 0) return true;
    std::vector<uint8_t> seen(num_states(), 0);
    std::vector<int32_t> todo{start};
    seen[start] = 1;
    while (!todo.empty()) {
        int32_t s = todo.back();
        todo.pop_back();
        if (accepting[s]) return false;
        for (int32_t c = 0; c < num_classes; ++c) {
            int32_t t = next[size_t(s) * num_classes + c];
            if (t != kDead && !seen[t]) {
                seen[t] = 1;
                todo.push_back(t);
            }
        }
    }
    return true;
}

namespace {

// Classes of the product: one per distinct (class in a, class in b) pair seen over the bytes.
struct JointClasses {
    std::array<uint8_t, 256> byte_class{};
    std::vector<std::pair<int32_t, int32_t>> members;  // joint class -> (a class, b class)
};

JointClasses joint_classes(const Dfa& a, const Dfa& b) {
    JointClasses j;
    std::map<std::pair<int32_t, int32_t>, int32_t> ids;
    for (int byte = 0; byte < 256; ++byte) {
        auto key = std::make_pair<int32_t, int32_t>(a.byte_class[byte], b.byte_class[byte]);
        auto [it, added] = ids.emplace(key, static_cast<int32_t>(j.members.size()));
        if (added) j.members.push_back(key);
        j.byte_class[byte] = static_cast<uint8_t>(it->second);
    }
    return j;
}

}  // namespace

Dfa dfa_product(const Dfa& a, const Dfa& b, DfaProduct op) {
    JointClasses joint = joint_classes(a, b);
    Dfa out;
    out.byte_class = joint.byte_class;
    out.num_classes = static_cast<int32_t>(joint.members.size());
    // b == kDead is a live pair for a difference: a may go on once b has failed.
    bool keep_dead_b = op == DfaProduct::kDifference;
    std::unordered_map<uint64_t, int32_t> ids;
    std::vector<std::pair<int32_t, int32_t>> pairs;
    auto intern = [&](int32_t sa, int32_t sb) {
        uint64_t key = (uint64_t(uint32_t(sa)) << 32) | uint32_t(sb);
        auto [it, added] = ids.emplace(key, static_cast<int32_t>(pairs.size()));
        if (added) {
            if (static_cast<int32_t>(pairs.size()) >= Dfa::kMaxStates)
                grammar_fail("grammar too large: an intersection of automata has more than {} states", Dfa::kMaxStates);
            pairs.emplace_back(sa, sb);
        }
        return it->second;
    };
    if (a.num_states() == 0) return out;
    out.start = intern(a.start, b.num_states() ? b.start : Dfa::kDead);
    for (size_t i = 0; i < pairs.size(); ++i) {
        auto [sa, sb] = pairs[i];
        bool acc_a = a.accepting[sa], acc_b = sb != Dfa::kDead && b.accepting[sb];
        out.accepting.push_back(op == DfaProduct::kIntersection ? (acc_a && acc_b) : (acc_a && !acc_b));
        for (const auto& [ca, cb] : joint.members) {
            int32_t ta = a.next[size_t(sa) * a.num_classes + ca];
            int32_t tb = sb == Dfa::kDead ? Dfa::kDead : b.next[size_t(sb) * b.num_classes + cb];
            bool live = ta != Dfa::kDead && (tb != Dfa::kDead || keep_dead_b);
            out.next.push_back(live ? intern(ta, tb) : Dfa::kDead);
        }
    }
    return dfa_trim(out);
}

Dfa dfa_trim(const Dfa& dfa) {
    int32_t n = dfa.num_states();
    if (n == 0) return dfa;
    // Co-reachability: walk the reversed edges (grouped by target) back from the accepting states.
    std::vector<int32_t> begin(n + 1, 0), preds;
    for (int32_t t : dfa.next)
        if (t != Dfa::kDead) ++begin[t + 1];
    for (int32_t s = 0; s < n; ++s) begin[s + 1] += begin[s];
    preds.resize(begin[n]);
    std::vector<int32_t> fill(begin.begin(), begin.end() - 1);
    for (int32_t s = 0; s < n; ++s)
        for (int32_t c = 0; c < dfa.num_classes; ++c) {
            int32_t t = dfa.next[size_t(s) * dfa.num_classes + c];
            if (t != Dfa::kDead) preds[fill[t]++] = s;
        }
    std::vector<uint8_t> useful(n, 0);
    std::vector<int32_t> todo;
    for (int32_t s = 0; s < n; ++s)
        if (dfa.accepting[s]) useful[s] = 1, todo.push_back(s);
    while (!todo.empty()) {
        int32_t s = todo.back();
        todo.pop_back();
        for (int32_t k = begin[s]; k < begin[s + 1]; ++k)
            if (!useful[preds[k]]) useful[preds[k]] = 1, todo.push_back(preds[k]);
    }
    Dfa out;
    out.byte_class = dfa.byte_class;
    out.num_classes = dfa.num_classes;
    if (!useful[dfa.start]) return out;  // empty language: no states
    std::vector<int32_t> remap(n, Dfa::kDead);
    std::vector<int32_t> order{dfa.start};
    remap[dfa.start] = 0;
    for (size_t i = 0; i < order.size(); ++i) {
        int32_t s = order[i];
        out.accepting.push_back(dfa.accepting[s]);
        for (int32_t c = 0; c < dfa.num_classes; ++c) {
            int32_t t = dfa.next[size_t(s) * dfa.num_classes + c];
            if (t == Dfa::kDead || !useful[t]) {
                out.next.push_back(Dfa::kDead);
                continue;
            }
            if (remap[t] == Dfa::kDead) {
                remap[t] = static_cast<int32_t>(order.size());
                order.push_back(t);
            }
            out.next.push_back(remap[t]);
        }
    }
    out.start = 0;
    return out;
}

Dfa dfa_minimize(const Dfa& input) {
    Dfa dfa = dfa_trim(input);
    int32_t n = dfa.num_states(), nc = dfa.num_classes;
    if (n == 0) return dfa;
    // Refine "accepting or not" by the blocks of the successors until the number of blocks holds.
    std::vector<int32_t> block(n);
    for (int32_t s = 0; s < n; ++s) block[s] = dfa.accepting[s];
    int32_t num_blocks = 0;
    for (;;) {
        std::map<std::vector<int32_t>, int32_t> ids;
        std::vector<int32_t> next_block(n), signature(nc + 1);
        for (int32_t s = 0; s < n; ++s) {
            signature[0] = block[s];
            for (int32_t c = 0; c < nc; ++c) {
                int32_t t = dfa.next[size_t(s) * nc + c];
                signature[c + 1] = t == Dfa::kDead ? -1 : block[t];
            }
            next_block[s] = ids.emplace(signature, static_cast<int32_t>(ids.size())).first->second;
        }
        bool stable = static_cast<int32_t>(ids.size()) == num_blocks;
        num_blocks = static_cast<int32_t>(ids.size());
        block.swap(next_block);
        if (stable) break;
    }
    Dfa out;
    out.byte_class = dfa.byte_class;
    out.num_classes = nc;
    out.next.assign(size_t(num_blocks) * nc, Dfa::kDead);
    out.accepting.assign(num_blocks, 0);
    for (int32_t s = 0; s < n; ++s) {
        out.accepting[block[s]] = dfa.accepting[s];
        for (int32_t c = 0; c < nc; ++c) {
            int32_t t = dfa.next[size_t(s) * nc + c];
            out.next[size_t(block[s]) * nc + c] = t == Dfa::kDead ? Dfa::kDead : block[t];
        }
    }
    out.start = block[dfa.start];
    return dfa_trim(out);
}

Dfa dfa_repeat(const Dfa& unit, int32_t min, int32_t max) {
    int32_t n = unit.num_states(), nc = unit.num_classes;
    int32_t levels = (max < 0 ? min : max) + 1;  // words completed; unbounded: the last level loops
    if (int64_t(levels) * n > Dfa::kMaxStates)
        grammar_fail("grammar too large: a repetition of {} needs more than {} automaton states", levels - 1, Dfa::kMaxStates);
    Dfa out;
    out.byte_class = unit.byte_class;
    out.num_classes = nc;
    out.next.assign(size_t(levels) * n * nc, Dfa::kDead);
    out.accepting.assign(size_t(levels) * n, 0);
    auto id = [&](int32_t level, int32_t u) { return level * n + u; };
    for (int32_t level = 0; level < levels; ++level) {
        out.accepting[id(level, unit.start)] = level >= min;
        for (int32_t u = 0; u < n; ++u) {
            if (unit.accepting[u]) continue;  // a finished word continues at the next level's start
            for (int32_t c = 0; c < nc; ++c) {
                int32_t t = unit.next[size_t(u) * nc + c];
                if (t == Dfa::kDead) continue;
                int32_t target = id(level, t);
                if (unit.accepting[t]) {
                    int32_t next_level = max < 0 ? std::min(level + 1, min) : level + 1;
                    if (next_level >= levels) continue;
                    target = id(next_level, unit.start);
                }
                out.next[size_t(id(level, u)) * nc + c] = target;
            }
        }
    }
    out.start = id(0, unit.start);
    return dfa_trim(out);
}

std::optional<Dfa> dfa_enclose(const Dfa& content, uint8_t open, uint8_t close) {
    // Classes: the content's, with `open` and `close` split off into classes of their own.
    std::array<uint8_t, 256> cls = content.byte_class;
    int32_t nc = content.num_classes;
    int32_t open_class = nc, close_class = open == close ? nc : nc + 1;
    int32_t out_classes = nc + (open == close ? 1 : 2);
    uint8_t old_open = cls[open], old_close = cls[close];
    cls[open] = static_cast<uint8_t>(open_class);
    cls[close] = static_cast<uint8_t>(close_class);
    int32_t n = content.num_states(), start = n, final_state = n + 1;
    Dfa out;
    out.byte_class = cls;
    out.num_classes = out_classes;
    out.next.assign(size_t(n + 2) * out_classes, Dfa::kDead);
    out.accepting.assign(n + 2, 0);
    for (int32_t s = 0; s < n; ++s) {
        for (int32_t c = 0; c < nc; ++c) out.next[size_t(s) * out_classes + c] = content.next[size_t(s) * nc + c];
        out.next[size_t(s) * out_classes + open_class] = content.next[size_t(s) * nc + old_open];
        out.next[size_t(s) * out_classes + close_class] = content.next[size_t(s) * nc + old_close];
        if (content.accepting[s]) {
            if (out.next[size_t(s) * out_classes + close_class] != Dfa::kDead) return std::nullopt;
            out.next[size_t(s) * out_classes + close_class] = final_state;
        }
    }
    out.next[size_t(start) * out_classes + open_class] = content.start;
    out.accepting[final_state] = 1;
    out.start = start;
    return dfa_trim(out);
}

}  // namespace deepinfer::grammar
