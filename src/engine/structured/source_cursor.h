#pragma once
// The read position in a grammar or a pattern being parsed — characters, UTF-8 code points,
// hex escapes — shared by the GBNF and regex parsers. Each parser says in fail() how to name
// the place of an error (line/column or offset).
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>

namespace fp4lm::engine::structured {

class SourceCursor {
 public:
  explicit SourceCursor(std::string_view s) : s_(s) {}
  virtual ~SourceCursor() = default;

 protected:
  [[noreturn]] virtual void fail(const std::string& what) const = 0;
  bool eof() const { return i_ >= s_.size(); }
  char peek() const { return s_[i_]; }

  char32_t next_cp() {
    const auto c = static_cast<unsigned char>(s_[i_]);
    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i_ + static_cast<size_t>(n) > s_.size()) fail("invalid UTF-8");
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s_[i_ + static_cast<size_t>(k)]) & 0x3F);
    i_ += static_cast<size_t>(n);
    return cp;
  }

  // n hex digits as a code point.
  uint32_t hex(size_t n) {
    if (i_ + n > s_.size()) fail("truncated hex escape");
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      const char h = s_[i_ + k];
      if (!std::isxdigit(static_cast<unsigned char>(h))) fail("bad hex digit in escape");
      v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
    }
    i_ += n;
    if (v > 0x10FFFF) fail("code point out of range");
    return v;
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace fp4lm::engine::structured
