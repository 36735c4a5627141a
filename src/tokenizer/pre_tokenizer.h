#pragma once
// HF tokenizers pre-tokenization: a pipeline of regex Split steps (PCRE2 with JIT, Unicode
// properties) and ByteLevel, producing the pieces that BPE encodes independently.
//
// Regex semantics follow Oniguruma (what HF tokenizers compiles with): `\s` is the Unicode
// White_Space set, so patterns are rewritten before PCRE2 sees them. Thread-safe after
// construction (match data is per call).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace deepinfer::tokenizer {

class Regex;

class PreTokenizer {
public:
    // Parses tokenizer.json's "pre_tokenizer" (null, Sequence, Split, ByteLevel); throws
    // deepinfer::Error for unsupported types or behaviours.
    explicit PreTokenizer(const nlohmann::json& spec);
    ~PreTokenizer();

    // Splits `text` into pieces (views of `text`), in order.
    void split(std::string_view text, std::vector<std::string_view>& out) const;

private:
    struct Step;
    void add_step(const nlohmann::json& spec);
    std::vector<std::unique_ptr<Step>> steps_;
};

// Oniguruma-compatible translation of `\s` / `\S` (exposed for tests).
std::string oniguruma_to_pcre2(const std::string& pattern);

}  // namespace deepinfer::tokenizer
