#include "grammar/codepoint_set.h"

#include <algorithm>

namespace deepinfer::grammar {

CodepointSet CodepointSet::range(uint32_t lo, uint32_t hi) {
    CodepointSet s;
    s.add_range(lo, hi);
    return s;
}

void CodepointSet::add_range(uint32_t lo, uint32_t hi) {
    if (lo > hi) return;
    hi = std::min(hi, kMax);
    // Merge with every range that overlaps or touches [lo, hi].
    auto first = std::lower_bound(ranges_.begin(), ranges_.end(), lo,
                                  [](const CodepointRange& r, uint32_t v) { return r.hi + 1 < v; });
    auto last = first;
    while (last != ranges_.end() && last->lo <= hi + 1) {
        lo = std::min(lo, last->lo);
        hi = std::max(hi, last->hi);
        ++last;
    }
    first = ranges_.erase(first, last);
    ranges_.insert(first, CodepointRange{lo, hi});
}

void CodepointSet::add(const CodepointSet& other) {
    for (const auto& r : other.ranges_) add_range(r.lo, r.hi);
}

CodepointSet CodepointSet::complement() const {
    CodepointSet out;
    uint32_t next = 0;
    for (const auto& r : ranges_) {
        if (r.lo > next) out.ranges_.push_back({next, r.lo - 1});
        next = r.hi + 1;
    }
    if (next <= kMax) out.ranges_.push_back({next, kMax});
    return out;
}

CodepointSet CodepointSet::intersect(const CodepointSet& other) const {
    CodepointSet out;
    size_t i = 0, j = 0;
    while (i < ranges_.size() && j < other.ranges_.size()) {
        uint32_t lo = std::max(ranges_[i].lo, other.ranges_[j].lo);
        uint32_t hi = std::min(ranges_[i].hi, other.ranges_[j].hi);
        if (lo <= hi) out.ranges_.push_back({lo, hi});
        if (ranges_[i].hi < other.ranges_[j].hi) ++i; else ++j;
    }
    return out;
}

bool CodepointSet::contains(uint32_t c) const {
    auto it = std::lower_bound(ranges_.begin(), ranges_.end(), c,
                               [](const CodepointRange& r, uint32_t v) { return r.hi < v; });
    return it != ranges_.end() && it->lo <= c;
}

}  // namespace deepinfer::grammar
