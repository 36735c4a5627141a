#pragma once
// The wire form of a prefill's state for the decode side: the prefix-cache spans of one or more
// prompts (prefix_spans.h), back to back, each prefixed by its length. The blobs are checked again
// (checksums, namespace, key chain) when the decode engine imports them; this layer only frames.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::cluster {

// "DISP" + u32 count, then per span: u64 length + bytes (little-endian, as both ends are x86/ARM LE).
std::string encode_spans(const std::vector<std::vector<std::byte>>& spans);
// Throws deepinfer::Error when `wire` is not a whole, well-framed message.
std::vector<std::vector<std::byte>> decode_spans(std::string_view wire);

}  // namespace deepinfer::cluster
