#pragma once
// A set of byte values (0..255): the label of every byte-level edge in the grammar automata.
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace deepinfer::grammar {

class ByteSet {
public:
    static ByteSet of(uint8_t b) {
        ByteSet s;
        s.add(b);
        return s;
    }
    static ByteSet range(uint8_t lo, uint8_t hi) {
        ByteSet s;
        s.add_range(lo, hi);
        return s;
    }
    static ByteSet all() { return range(0, 255); }

    void add(uint8_t b) { words_[b >> 6] |= uint64_t{1} << (b & 63); }
    void add_range(uint8_t lo, uint8_t hi) {
        for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
    }
    void add(const ByteSet& o) {
        for (int i = 0; i < 4; ++i) words_[i] |= o.words_[i];
    }
    bool contains(uint8_t b) const { return (words_[b >> 6] >> (b & 63)) & 1; }
    bool empty() const { return (words_[0] | words_[1] | words_[2] | words_[3]) == 0; }
    int count() const {
        int n = 0;
        for (uint64_t w : words_) n += std::popcount(w);
        return n;
    }
    // Smallest member; only meaningful when the set is not empty.
    int first() const {
        for (int i = 0; i < 4; ++i)
            if (words_[i]) return i * 64 + std::countr_zero(words_[i]);
        return -1;
    }
    ByteSet complement() const {
        ByteSet s;
        for (int i = 0; i < 4; ++i) s.words_[i] = ~words_[i];
        return s;
    }
    ByteSet operator&(const ByteSet& o) const {
        ByteSet s;
        for (int i = 0; i < 4; ++i) s.words_[i] = words_[i] & o.words_[i];
        return s;
    }
    bool operator==(const ByteSet& o) const = default;
    size_t hash() const {
        size_t h = 0;
        for (uint64_t w : words_) h = h * 0x9E3779B97F4A7C15ull + w;
        return h;
    }

private:
    std::array<uint64_t, 4> words_{};
};

}  // namespace deepinfer::grammar
