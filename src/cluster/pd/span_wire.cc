#include "cluster/pd/span_wire.h"

#include <cstdint>
#include <cstring>

#include "base/error.h"

namespace deepinfer::cluster {

namespace {

constexpr char kMagic[4] = {'D', 'I', 'S', 'P'};
// A span is a few MiB at most; anything larger is a corrupt length, not a span.
constexpr uint64_t kMaxSpanBytes = uint64_t{1} << 32;

template <typename T>
void put(std::string& out, T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T take(std::string_view& in) {
    DI_CHECK(in.size() >= sizeof(T), "prefill state: truncated ({} bytes left, {} expected)", in.size(), sizeof(T));
    T v;
    std::memcpy(&v, in.data(), sizeof v);
    in.remove_prefix(sizeof v);
    return v;
}

}  // namespace

std::string encode_spans(const std::vector<std::vector<std::byte>>& spans) {
    size_t total = sizeof kMagic + sizeof(uint32_t);
    for (const auto& s : spans) total += sizeof(uint64_t) + s.size();
    std::string out;
    out.reserve(total);
    out.append(kMagic, sizeof kMagic);
    put(out, static_cast<uint32_t>(spans.size()));
    for (const auto& s : spans) {
        put(out, static_cast<uint64_t>(s.size()));
        out.append(reinterpret_cast<const char*>(s.data()), s.size());
    }
    return out;
}

std::vector<std::vector<std::byte>> decode_spans(std::string_view wire) {
    DI_CHECK(wire.size() >= sizeof kMagic && std::memcmp(wire.data(), kMagic, sizeof kMagic) == 0,
             "prefill state: not a span message (bad magic)");
    wire.remove_prefix(sizeof kMagic);
    auto count = take<uint32_t>(wire);
    std::vector<std::vector<std::byte>> spans;
    for (uint32_t i = 0; i < count; ++i) {
        auto bytes = take<uint64_t>(wire);
        DI_CHECK(bytes <= kMaxSpanBytes && bytes <= wire.size(), "prefill state: span {} claims {} bytes, {} left", i, bytes,
                 wire.size());
        const auto* p = reinterpret_cast<const std::byte*>(wire.data());
        spans.emplace_back(p, p + bytes);
        wire.remove_prefix(bytes);
    }
    DI_CHECK(wire.empty(), "prefill state: {} stray bytes after {} spans", wire.size(), count);
    return spans;
}

}  // namespace deepinfer::cluster
