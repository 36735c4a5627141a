#include "grammar/token_trie.h"

#include <algorithm>

#include "grammar/encoding.h"
#include "grammar/grammar_error.h"

namespace deepinfer::grammar {

namespace {

// Well-formed UTF-8, except that the last character may be cut short.
bool is_utf8_prefix(const std::string& bytes) {
    size_t pos = 0;
    uint32_t c = 0;
    while (pos < bytes.size()) {
        if (decode_utf8(bytes, pos, c)) continue;
        // A cut character: a valid lead byte and continuation bytes up to the end.
        std::string padded = bytes.substr(pos);
        for (char fill : {'\x80', '\x80', '\x80'}) {
            size_t p = 0;
            if (decode_utf8(padded, p, c) && p == padded.size()) return true;
            padded.push_back(fill);
        }
        size_t p = 0;
        return decode_utf8(padded, p, c) && p == padded.size();
    }
    return true;
}

}  // namespace

TokenTrie TokenTrie::build(const std::vector<std::string>& token_bytes, std::vector<int32_t> ids) {
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
        return token_bytes[a] != token_bytes[b] ? token_bytes[a] < token_bytes[b] : a < b;
    });
    TokenTrie trie;
    trie.token_ids_ = ids;
    trie.nodes_.push_back({0, 0, 0, 0, 0, 0});
    std::vector<int32_t> path{0};  // open nodes from the root to the last inserted token
    const std::string* previous = nullptr;
    for (size_t k = 0; k < ids.size(); ++k) {
        const std::string& bytes = token_bytes[ids[k]];
        if (bytes.size() > 0xFFFF) grammar_fail("token {} is longer than 65535 bytes", ids[k]);
        size_t common = 0;
        if (previous) {
            size_t limit = std::min(previous->size(), bytes.size());
            while (common < limit && (*previous)[common] == bytes[common]) ++common;
        }
        // Close the nodes past the common prefix: their subtrees are complete.
        while (path.size() > common + 1) {
            trie.nodes_[path.back()].skip = static_cast<int32_t>(trie.nodes_.size());
            path.pop_back();
        }
        for (size_t i = common; i < bytes.size(); ++i) {
            path.push_back(static_cast<int32_t>(trie.nodes_.size()));
            trie.nodes_.push_back({static_cast<uint8_t>(bytes[i]), 0, static_cast<uint16_t>(i + 1), 0, 0, 0});
        }
        TrieNode& end = trie.nodes_[path.back()];
        if (end.num_tokens == 0) end.first_token = static_cast<int32_t>(k);
        ++end.num_tokens;
        trie.max_depth_ = std::max<int32_t>(trie.max_depth_, static_cast<int32_t>(bytes.size()));
        previous = &bytes;
    }
    while (!path.empty()) {
        trie.nodes_[path.back()].skip = static_cast<int32_t>(trie.nodes_.size());
        path.pop_back();
    }
    // Subtree facts, children before parents (reverse preorder).
    size_t n = trie.nodes_.size();
    trie.subtree_bytes_.assign(n, {});
    trie.subtree_tokens_.assign(n + 1, static_cast<int32_t>(ids.size()));
    int32_t next_token = static_cast<int32_t>(ids.size());
    for (size_t i = n; i-- > 0;) {
        const TrieNode& node = trie.nodes_[i];
        if (node.num_tokens) next_token = node.first_token;
        trie.subtree_tokens_[i] = next_token;
        if (i == 0) continue;
        SubtreeBytes& sb = trie.subtree_bytes_[i];
        if (node.byte >= 0x80) sb.non_ascii = true;
        else sb.ascii[node.byte >> 6] |= uint64_t{1} << (node.byte & 63);
        for (int32_t k = 0; k < node.num_tokens; ++k) sb.utf8 = sb.utf8 && is_utf8_prefix(token_bytes[ids[node.first_token + k]]);
        for (size_t c = i + 1; c < size_t(node.skip); c = trie.nodes_[c].skip) {
            const SubtreeBytes& child = trie.subtree_bytes_[c];
            sb.ascii[0] |= child.ascii[0], sb.ascii[1] |= child.ascii[1], sb.non_ascii |= child.non_ascii;
            sb.utf8 = sb.utf8 && child.utf8;
        }
    }
    return trie;
}

}  // namespace deepinfer::grammar
