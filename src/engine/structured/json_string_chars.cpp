#include "engine/structured/json_string_chars.h"

#include <fmt/format.h>

#include "engine/structured/utf8_ranges.h"

namespace fp4lm::engine::structured {

namespace {
std::string escape_of(char32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: return fmt::format("\\u{:04x}", static_cast<unsigned>(c));
  }
}
bool must_escape(char32_t c) { return c < 0x20 || c == '"' || c == '\\'; }
}  // namespace

Expr json_string_char() {
  const Expr hex = Expr::chars({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
  return Expr::alt({
      Expr::chars({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}),
      Expr::seq({Expr::bytes("\\"), Expr::chars({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'},
                                                 {'n', 'n'}, {'r', 'r'}, {'t', 't'}})}),
      Expr::seq({Expr::bytes("\\u"), hex, hex, hex, hex}),
  });
}

Expr json_chars_in(const std::vector<std::pair<char32_t, char32_t>>& ranges) {
  std::vector<std::pair<char32_t, char32_t>> plain;
  std::vector<Expr> alts;
  for (auto [a, b] : ranges) {
    for (char32_t c = a; c <= b && c < 0x5D; ++c) {
      if (must_escape(c)) alts.push_back(Expr::bytes(escape_of(c)));
    }
    // The plain part: [a, b] minus the escaped characters.
    char32_t lo = a;
    for (char32_t c = a; c <= b && c < 0x5D; ++c) {
      if (must_escape(c)) {
        if (c > lo) plain.emplace_back(lo, c - 1);
        lo = c + 1;
      }
    }
    if (lo <= b) plain.emplace_back(lo, b);
  }
  if (!plain.empty()) alts.insert(alts.begin(), Expr::chars(std::move(plain)));
  if (alts.empty()) return Expr::chars({});
  return Expr::alt(std::move(alts));
}

}  // namespace fp4lm::engine::structured
