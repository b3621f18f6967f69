#pragma once
// GPT-2's reversible byte <-> printable-character mapping used by ByteLevel pre-tokenizers and
// decoders: printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in order.
#include <cstdint>
#include <string>
#include <string_view>

namespace fp4lm::tokenizer::byte_level {

// The UTF-8 encoding of the character standing for byte b.
std::string_view byte_to_char(uint8_t b);

// The byte a character stands for, or -1 when the character is not in the mapping.
int char_to_byte(char32_t cp);

// Appends the mapped form of `bytes` to `out`.
void encode(std::string_view bytes, std::string& out);

}  // namespace fp4lm::tokenizer::byte_level
