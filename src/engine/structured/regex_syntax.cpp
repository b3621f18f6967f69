#include "engine/structured/regex_syntax.h"

#include <fmt/format.h>

#include <cctype>

#include "engine/structured/grammar_error.h"
#include "engine/structured/source_cursor.h"
#include "engine/structured/json_string_chars.h"
#include "engine/structured/utf8_ranges.h"

namespace fp4lm::engine::structured {

namespace {

using Ranges = std::vector<std::pair<char32_t, char32_t>>;

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

class RegexParser : SourceCursor {
 public:
  RegexParser(std::string_view s, bool json) : SourceCursor(s), json_(json) {}

  Expr run() {
    if (i_ < s_.size() && s_[i_] == '^') ++i_;
    Expr e = alternation();
    if (i_ < s_.size()) fail(s_[i_] == ')' ? "unbalanced ')'" : "unexpected character");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const override {
    throw GrammarError(fmt::format("regex: {} at position {} of '{}'", what, i_, s_));
  }
  Expr chars(Ranges r) {
    r = normalize_ranges(std::move(r));
    return json_ ? json_chars_in(r) : Expr::chars(std::move(r));
  }

  Expr alternation() {
    std::vector<Expr> alts = {sequence()};
    while (!eof() && peek() == '|') {
      ++i_;
      alts.push_back(sequence());
    }
    return Expr::alt(std::move(alts));
  }

  Expr sequence() {
    std::vector<Expr> items;
    while (!eof() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        ++i_;
        if (!eof() && peek() != ')' && peek() != '|') fail("'$' only at the end is supported");
        continue;
      }
      if (peek() == '^') fail("'^' only at the start is supported");
      Expr a = atom();
      items.push_back(quantified(std::move(a)));
    }
    return Expr::seq(std::move(items));
  }

  int64_t number() {
    if (eof() || !std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a number in {m,n}");
    int64_t v = 0;
    while (!eof() && std::isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > 100000) fail("repetition count too large");
      ++i_;
    }
    return v;
  }

  Expr quantified(Expr a) {
    while (!eof()) {
      int64_t lo, hi;
      const char c = peek();
      if (c == '*') lo = 0, hi = -1, ++i_;
      else if (c == '+') lo = 1, hi = -1, ++i_;
      else if (c == '?') lo = 0, hi = 1, ++i_;
      else if (c == '{') {
        const size_t save = i_;
        ++i_;
        if (eof() || !std::isdigit(static_cast<unsigned char>(peek()))) {  // a literal '{'
          i_ = save;
          return a;
        }
        lo = number();
        hi = lo;
        if (!eof() && peek() == ',') {
          ++i_;
          hi = (!eof() && peek() == '}') ? -1 : number();
        }
        if (eof() || peek() != '}') fail("expected '}' closing a repetition");
        ++i_;
        if (hi >= 0 && hi < lo) fail("repetition {m,n} with n < m");
      } else {
        return a;
      }
      if (!eof() && peek() == '?') ++i_;  // lazy: same language
      else if (!eof() && peek() == '+') fail("possessive quantifiers are not supported");
      a = Expr::repeat(std::move(a), lo, hi);
    }
    return a;
  }

  Expr atom() {
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (!eof() && peek() == '?') {
        ++i_;
        if (!eof() && peek() == ':') {
          ++i_;
        } else if (!eof() && peek() == '<' && i_ + 1 < s_.size() && s_[i_ + 1] != '=' && s_[i_ + 1] != '!') {
          while (!eof() && peek() != '>') ++i_;
          if (eof()) fail("unterminated group name");
          ++i_;
        } else if (!eof() && peek() == 'P' && i_ + 1 < s_.size() && s_[i_ + 1] == '<') {
          while (!eof() && peek() != '>') ++i_;
          if (eof()) fail("unterminated group name");
          ++i_;
        } else {
          fail("lookaround and inline flags '(?' are not supported");
        }
      }
      Expr e = alternation();
      if (eof() || peek() != ')') fail("missing ')'");
      ++i_;
      return e;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++i_;
      return chars({{0, 9}, {11, 12}, {14, 0x2027}, {0x202A, 0x10FFFF}});
    }
    if (c == '*' || c == '+' || c == '?') fail("nothing to repeat");
    if (c == '\\') {
      ++i_;
      if (eof()) fail("trailing backslash");
      Ranges r;
      if (class_escape(r)) return chars(std::move(r));
      const char32_t e = escape_char();
      return chars({{e, e}});
    }
    const char32_t cp = next_cp();
    return chars({{cp, cp}});
  }

  // \d \w \s and their negations; false when the escape is a single character.
  bool class_escape(Ranges& r) {
    const char e = peek();
    const Ranges* base = e == 'd' || e == 'D' ? &kDigit : e == 'w' || e == 'W' ? &kWord
                         : e == 's' || e == 'S'                          ? &kSpace
                                                                         : nullptr;
    if (!base) return false;
    ++i_;
    const Ranges n = normalize_ranges(*base);
    const Ranges add = std::isupper(static_cast<unsigned char>(e)) ? complement_ranges(n) : n;
    r.insert(r.end(), add.begin(), add.end());
    return true;
  }

  // After the backslash: the one character it stands for.
  char32_t escape_char() {
    const char e = peek();
    if (std::isdigit(static_cast<unsigned char>(e)) && e != '0') fail("backreferences are not supported");
    if (e == 'b' || e == 'B') fail("word boundaries (\\b, \\B) are not supported");
    ++i_;
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'x': return hex(2);
      case 'u':
        if (!eof() && peek() == '{') {
          ++i_;
          size_t k = 0;
          while (i_ + k < s_.size() && s_[i_ + k] != '}') ++k;
          if (k == 0 || k > 6 || i_ + k >= s_.size()) fail("bad \\u{...} escape");
          const uint32_t v = hex(k);
          ++i_;
          return v;
        }
        return hex(4);
      default:
        if (std::isalnum(static_cast<unsigned char>(e))) fail(fmt::format("unknown escape '\\{}'", e));
        --i_;
        return next_cp();
    }
  }

  Expr char_class() {
    ++i_;  // '['
    bool negate = false;
    if (!eof() && peek() == '^') {
      negate = true;
      ++i_;
    }
    Ranges r;
    bool first = true;
    while (true) {
      if (eof()) fail("unterminated character class");
      if (peek() == ']' && !first) break;
      first = false;
      char32_t lo;
      if (peek() == '\\') {
        ++i_;
        if (eof()) fail("trailing backslash");
        if (class_escape(r)) continue;
        lo = peek() == 'b' ? (++i_, U'\b') : escape_char();
      } else {
        lo = next_cp();
      }
      char32_t hi = lo;
      if (i_ + 1 < s_.size() && peek() == '-' && s_[i_ + 1] != ']') {
        ++i_;
        if (peek() == '\\') {
          ++i_;
          Ranges dummy;
          if (class_escape(dummy)) fail("a class escape cannot end a range");
          hi = escape_char();
        } else {
          hi = next_cp();
        }
        if (hi < lo) fail("character range out of order");
      }
      r.emplace_back(lo, hi);
    }
    ++i_;  // ']'
    r = normalize_ranges(std::move(r));
    if (negate) r = complement_ranges(r);
    return chars(std::move(r));
  }

  bool json_;
};

}  // namespace

Expr parse_regex(std::string_view pattern, bool inside_json_string) {
  return RegexParser(pattern, inside_json_string).run();
}

}  // namespace fp4lm::engine::structured
