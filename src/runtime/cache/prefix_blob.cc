#include "runtime/cache/prefix_blob.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

namespace deepinfer::runtime {
namespace {

constexpr uint32_t kMagic = 0x43504944;  // "DIPC"
constexpr uint32_t kVersion = 1;

struct Header {
    uint32_t magic = kMagic;
    uint32_t version = kVersion;
    uint64_t namespace_seed = 0;
    PrefixKey key, parent;
    int64_t span_tokens = 0;
    int64_t payload_bytes = 0;
    uint32_t has_carries = 0;
    uint32_t reserved = 0;
    uint64_t payload_checksum = 0;
    uint64_t header_checksum = 0;  // of everything before it, and the tokens
};

Header read_header(const std::byte* blob) {
    Header h;
    std::memcpy(&h, blob, sizeof(h));
    return h;
}

// Where the payload starts: after the header and the tokens, on a 64-byte boundary.
int64_t payload_start(int64_t span_tokens) {
    int64_t head = static_cast<int64_t>(sizeof(Header)) + span_tokens * int64_t{sizeof(int32_t)};
    return (head + 63) / 64 * 64;
}

// Of everything before the payload (the tokens and the zero padding too) but the checksum itself.
uint64_t header_checksum(const std::byte* blob, int64_t span_tokens) {
    std::vector<std::byte> bytes(blob, blob + offsetof(Header, header_checksum));
    bytes.insert(bytes.end(), blob + sizeof(Header), blob + payload_start(span_tokens));
    return checksum64(bytes);
}

}  // namespace

BlobLayout::BlobLayout(const model::PrefixGeometry& g)
    : span_tokens(g.span_tokens), block_bytes(g.block_bytes), carry_bytes(g.carry_bytes) {
    for (int i = 0; i < 2; ++i) group_bytes[i] = g.blocks_per_span[i] * g.block_bytes[i];
}

int64_t BlobLayout::payload_offset() const { return payload_start(span_tokens); }

std::byte* BlobLayout::block(std::byte* blob, int g, int64_t i) const {
    return blob + payload_offset() + (g == 1 ? group_bytes[0] : 0) + i * block_bytes[g];
}

void begin_blob(std::byte* blob, const BlobLayout& layout, const BlobInfo& info) {
    Header h;
    h.namespace_seed = info.namespace_seed;
    h.key = info.key;
    h.parent = info.parent;
    h.span_tokens = layout.span_tokens;
    h.has_carries = info.has_carries ? 1 : 0;
    h.payload_bytes = layout.group_bytes[0] + layout.group_bytes[1] + (info.has_carries ? layout.carry_bytes : 0);
    std::memcpy(blob, &h, sizeof(h));
    std::memcpy(blob + sizeof(Header), info.tokens.data(), info.tokens.size_bytes());
    std::byte* tokens_end = blob + sizeof(Header) + info.tokens.size_bytes();
    std::fill(tokens_end, blob + layout.payload_offset(), std::byte{0});
}

int64_t seal_blob(std::byte* blob, const BlobLayout& layout) {
    Header h = read_header(blob);
    h.payload_checksum = checksum64({blob + layout.payload_offset(), static_cast<size_t>(h.payload_bytes)});
    std::memcpy(blob, &h, sizeof(h));
    h.header_checksum = header_checksum(blob, h.span_tokens);
    std::memcpy(blob, &h, sizeof(h));
    return layout.payload_offset() + h.payload_bytes;
}

int64_t blob_bytes(const std::byte* blob) {
    Header h = read_header(blob);
    return payload_start(h.span_tokens) + h.payload_bytes;
}

bool blob_has_carries(const std::byte* blob) { return read_header(blob).has_carries != 0; }
PrefixKey blob_parent(const std::byte* blob) { return read_header(blob).parent; }
PrefixKey blob_key(const std::byte* blob) { return read_header(blob).key; }

std::span<const int32_t> blob_tokens(const std::byte* blob) {
    return {reinterpret_cast<const int32_t*>(blob + sizeof(Header)), static_cast<size_t>(read_header(blob).span_tokens)};
}

std::string check_blob(std::span<const std::byte> blob, const BlobLayout& layout, uint64_t namespace_seed,
                       const PrefixKey& key) {
    if (static_cast<int64_t>(blob.size()) < layout.payload_offset()) return "truncated header";
    Header h = read_header(blob.data());
    if (h.magic != kMagic || h.version != kVersion) return "not a prefix-cache entry of this version";
    if (h.span_tokens != layout.span_tokens) return "another span length";
    if (h.header_checksum != header_checksum(blob.data(), h.span_tokens)) return "header checksum mismatch";
    if (h.namespace_seed != namespace_seed) return "another model or layout";
    if (!(h.key == key)) return "another key";
    int64_t expect = layout.group_bytes[0] + layout.group_bytes[1] + (h.has_carries ? layout.carry_bytes : 0);
    if (h.payload_bytes != expect) return "payload size does not match the layout";
    if (static_cast<int64_t>(blob.size()) < layout.payload_offset() + h.payload_bytes) return "truncated payload";
    if (checksum64(blob.subspan(layout.payload_offset(), h.payload_bytes)) != h.payload_checksum)
        return "payload checksum mismatch";
    return {};
}

}  // namespace deepinfer::runtime
