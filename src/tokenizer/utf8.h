#pragma once
// UTF-8 helpers with the exact semantics of Rust's String::from_utf8_lossy (what HF tokenizers
// uses when decoding): each maximal invalid subsequence becomes one U+FFFD.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::tokenizer {

// Byte offset of the first invalid UTF-8 sequence, or npos when `s` is valid (overlong forms,
// surrogates and code points past U+10FFFF are invalid).
size_t find_invalid_utf8(std::string_view s);

// Lossy conversion of `bytes`. With `keep_incomplete_tail`, a trailing sequence that is a valid
// prefix of a character is left unconverted and its length returned in *tail_len (for streaming).
std::string utf8_lossy(std::string_view bytes, bool keep_incomplete_tail = false, size_t* tail_len = nullptr);

// Appends the UTF-8 encoding of a code point.
void append_utf8(std::string& out, uint32_t cp);

// Decodes the code point starting at s[i] (s valid UTF-8) and advances i.
uint32_t next_code_point(std::string_view s, size_t& i);

}  // namespace deepinfer::tokenizer
