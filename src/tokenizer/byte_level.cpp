#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace fp4lm::tokenizer::byte_level {

namespace {

struct Tables {
  std::array<std::string, 256> to_char;
  std::array<int16_t, 512> to_byte;  // indexed by code point; all mapped code points are < 0x144
  Tables() {
    to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      utf8::append(to_char[b], cp);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::string_view byte_to_char(uint8_t b) { return tables().to_char[b]; }

int char_to_byte(char32_t cp) { return cp < 512 ? tables().to_byte[cp] : -1; }

void encode(std::string_view bytes, std::string& out) {
  const auto& t = tables();
  out.reserve(out.size() + bytes.size() * 2);
  for (unsigned char b : bytes) out.append(t.to_char[b]);
}

}  // namespace fp4lm::tokenizer::byte_level
