#pragma once
// Code point ranges -> UTF-8 byte-range sequences: [U+0080, U+07FF] is the one sequence
// [C2-DF][80-BF], and so on, so a character class can be matched one byte at a time (tokens
// may end in the middle of a character). Surrogates (U+D800..U+DFFF) are left out.
#include <array>
#include <cstdint>
#include <utility>
#include <string>
#include <vector>

namespace fp4lm::engine::structured {

using ByteRangeSeq = std::vector<std::pair<uint8_t, uint8_t>>;  // one inclusive byte range per byte

std::vector<ByteRangeSeq> utf8_sequences(char32_t lo, char32_t hi);

// Sorted, merged, clipped to [0, 0x10FFFF].
std::vector<std::pair<char32_t, char32_t>> normalize_ranges(std::vector<std::pair<char32_t, char32_t>> r);
// The complement in [0, 0x10FFFF] of normalized ranges.
std::vector<std::pair<char32_t, char32_t>> complement_ranges(const std::vector<std::pair<char32_t, char32_t>>& r);

// The UTF-8 encoding of one code point.
void append_utf8(char32_t cp, std::string& out);

}  // namespace fp4lm::engine::structured
