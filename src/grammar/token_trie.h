#pragma once
// The vocabulary as a byte trie laid out in preorder: a node's subtree is the index range
// [node + 1, node.skip), so a walk that rejects a prefix jumps over every token sharing it.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace deepinfer::grammar {

struct TrieNode {
    uint8_t byte;         // the byte leading to this node (unused for the root)
    uint8_t unused = 0;
    uint16_t depth;       // number of bytes from the root
    int32_t skip;         // index just past this node's subtree
    int32_t first_token;  // tokens ending here: TokenTrie::token_ids()[first_token, +num_tokens)
    int32_t num_tokens;
};

// The bytes on the edges of a subtree (the node's own byte included): ASCII as a 128-bit set,
// whether any byte is >= 0x80, and whether every token of the subtree is well-formed UTF-8 (a
// partial last character allowed). A state that loops on all those bytes (for non-ASCII: on every
// non-ASCII character, with well-formed tokens) accepts every token below.
struct SubtreeBytes {
    uint64_t ascii[2] = {0, 0};
    bool non_ascii = false;
    bool utf8 = true;
};

class TokenTrie {
public:
    // A trie of the given token ids; token_bytes is indexed by id.
    static TokenTrie build(const std::vector<std::string>& token_bytes, std::vector<int32_t> ids);

    std::span<const TrieNode> nodes() const { return nodes_; }
    const SubtreeBytes& subtree_bytes(int32_t node) const { return subtree_bytes_[node]; }
    // Tokens of the subtree of `node`: token_ids()[subtree_tokens(node), subtree_tokens(node.skip)).
    int32_t subtree_tokens(int32_t node) const { return subtree_tokens_[node]; }
    std::span<const int32_t> token_ids() const { return token_ids_; }
    int32_t max_depth() const { return max_depth_; }

private:
    std::vector<TrieNode> nodes_;
    std::vector<int32_t> token_ids_;
    std::vector<SubtreeBytes> subtree_bytes_;
    std::vector<int32_t> subtree_tokens_;  // [nodes + 1]
    int32_t max_depth_ = 0;
};

}  // namespace deepinfer::grammar
