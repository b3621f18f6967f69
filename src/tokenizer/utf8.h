#pragma once
// UTF-8 helpers and the Unicode character properties the tokenizer pipeline asks about
// (backed by utf8proc, so they follow the same Unicode tables as the normalizers).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fp4lm::tokenizer::utf8 {

// Length of the UTF-8 sequence announced by lead byte `b` (1 for a stray continuation byte, so
// scanning always advances).
inline size_t seq_len(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

// Decodes the code point at s[i] and advances i. Malformed input yields U+FFFD and advances one
// byte.
char32_t next(std::string_view s, size_t& i);

// Decodes the last code point before byte offset `end`; returns its start in `start`.
char32_t prev(std::string_view s, size_t end, size_t& start);

void append(std::string& out, char32_t cp);

bool is_valid(std::string_view s);

// Replaces every maximal invalid subsequence with U+FFFD (the "substitution of maximal subparts"
// practice that Rust's String::from_utf8_lossy and Hugging Face decoders follow).
std::string to_valid_lossy(std::string_view bytes);

// Number of bytes at the end of `s` that form an incomplete (but so far valid) UTF-8 sequence.
size_t incomplete_tail(std::string_view s);

// Unicode properties.
bool is_whitespace(char32_t cp);  // White_Space property (Rust char::is_whitespace)
bool is_numeric(char32_t cp);     // general category Nd, Nl or No (Rust char::is_numeric)
bool is_word_char(char32_t cp);   // regex \w: letters, marks, numbers, connector punctuation

}  // namespace fp4lm::tokenizer::utf8
