#pragma once
// A set of Unicode code points kept as sorted, disjoint, non-adjacent closed ranges. Regex classes
// and JSON string alphabets are built as code point sets and lowered to bytes only at the end, so
// the same class can be encoded as raw UTF-8 or as JSON string content (with escapes).
#include <cstdint>
#include <vector>

namespace deepinfer::grammar {

struct CodepointRange {
    uint32_t lo, hi;
    bool operator==(const CodepointRange&) const = default;
};

class CodepointSet {
public:
    static constexpr uint32_t kMax = 0x10FFFF;

    CodepointSet() = default;
    static CodepointSet of(uint32_t c) { return range(c, c); }
    static CodepointSet range(uint32_t lo, uint32_t hi);
    static CodepointSet all() { return range(0, kMax); }

    void add(uint32_t c) { add_range(c, c); }
    void add_range(uint32_t lo, uint32_t hi);
    void add(const CodepointSet& other);
    CodepointSet complement() const;
    CodepointSet intersect(const CodepointSet& other) const;
    CodepointSet minus(const CodepointSet& other) const { return intersect(other.complement()); }
    bool contains(uint32_t c) const;
    bool empty() const { return ranges_.empty(); }
    const std::vector<CodepointRange>& ranges() const { return ranges_; }
    bool operator==(const CodepointSet&) const = default;

private:
    std::vector<CodepointRange> ranges_;
};

}  // namespace deepinfer::grammar
