#include "grammar/dfa.h"

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
        if (added) pairs.emplace_back(sa, sb);
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

}  // namespace deepinfer::grammar
