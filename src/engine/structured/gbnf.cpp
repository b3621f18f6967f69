#include "engine/structured/gbnf.h"

#include <fmt/format.h>

#include <cctype>

#include "engine/structured/grammar_error.h"
#include "engine/structured/source_cursor.h"
#include "engine/structured/utf8_ranges.h"

namespace fp4lm::engine::structured {

namespace {

bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; }

class GbnfParser : SourceCursor {
 public:
  explicit GbnfParser(std::string_view s) : SourceCursor(s) {}

  ExprGrammar run() {
    ExprGrammar g;
    skip_space();
    if (eof()) fail("the grammar is empty");
    while (!eof()) {
      const std::string name = parse_name();
      skip_space();
      if (s_.substr(i_, 3) != "::=") fail(fmt::format("expected '::=' after rule name '{}'", name));
      i_ += 3;
      if (g.rules.count(name)) fail(fmt::format("rule '{}' is defined twice", name));
      g.define(name, alternatives(false));
      skip_space();
    }
    return g;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const override {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < i_ && k < s_.size(); ++k) {
      if (s_[k] == '\n') ++line, col = 1;
      else ++col;
    }
    throw GrammarError(fmt::format("grammar: {} (line {}, column {})", what, line, col));
  }
  void skip_space() {
    while (!eof()) {
      if (peek() == '#') {
        while (!eof() && peek() != '\n') ++i_;
      } else if (std::isspace(static_cast<unsigned char>(peek()))) {
        ++i_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = i_;
    while (!eof() && name_char(peek())) ++i_;
    if (i_ == start) fail(fmt::format("expected a rule name, found '{}'", peek()));
    return std::string(s_.substr(start, i_ - start));
  }

  // At a rule name followed by '::=': the next rule starts here.
  bool at_rule_start() const {
    size_t k = i_;
    while (k < s_.size() && name_char(s_[k])) ++k;
    if (k == i_) return false;
    while (k < s_.size() && std::isspace(static_cast<unsigned char>(s_[k]))) ++k;
    return s_.substr(k, 3) == "::=";
  }

  Expr alternatives(bool nested) {
    std::vector<Expr> alts = {sequence(nested)};
    while (!eof() && peek() == '|') {
      ++i_;
      alts.push_back(sequence(nested));
    }
    return Expr::alt(std::move(alts));
  }

  Expr sequence(bool nested) {
    std::vector<Expr> items;
    while (true) {
      skip_space();
      if (eof() || peek() == '|' || peek() == ')') break;
      if (!nested && at_rule_start()) break;
      items.push_back(quantified(atom()));
    }
    return Expr::seq(std::move(items));
  }

  int64_t number() {
    skip_space();
    if (eof() || !std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a number in {m,n}");
    int64_t v = 0;
    while (!eof() && std::isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > 100000) fail("repetition count too large");
      ++i_;
    }
    skip_space();
    return v;
  }

  Expr quantified(Expr a) {
    while (!eof()) {
      const char c = peek();
      if (c == '*') a = Expr::repeat(std::move(a), 0, -1), ++i_;
      else if (c == '+') a = Expr::repeat(std::move(a), 1, -1), ++i_;
      else if (c == '?') a = Expr::repeat(std::move(a), 0, 1), ++i_;
      else if (c == '{') {
        ++i_;
        const int64_t lo = number();
        int64_t hi = lo;
        if (!eof() && peek() == ',') {
          ++i_;
          skip_space();
          hi = (!eof() && peek() == '}') ? -1 : number();
        }
        if (eof() || peek() != '}') fail("expected '}' closing a repetition");
        ++i_;
        if (hi >= 0 && hi < lo) fail("repetition {m,n} with n < m");
        a = Expr::repeat(std::move(a), lo, hi);
      } else {
        break;
      }
    }
    return a;
  }

  // One (possibly escaped) character of a literal or class.
  char32_t literal_char() {
    if (peek() != '\\') return next_cp();
    ++i_;
    if (eof()) fail("trailing backslash");
    const char e = peek();
    ++i_;
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'x': return hex(2);
      case 'u': return hex(4);
      case 'U': return hex(8);
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': return static_cast<char32_t>(e);
      default: fail(fmt::format("unknown escape '\\{}'", e));
    }
  }

  Expr atom() {
    const char c = peek();
    if (c == '"' || c == '\'') {
      ++i_;
      std::string lit;
      while (true) {
        if (eof() || peek() == '\n') fail("unterminated string literal");
        if (peek() == c) break;
        append_utf8(literal_char(), lit);
      }
      ++i_;
      return Expr::bytes(std::move(lit));
    }
    if (c == '[') {
      ++i_;
      bool negate = false;
      if (!eof() && peek() == '^') negate = true, ++i_;
      std::vector<std::pair<char32_t, char32_t>> r;
      while (true) {
        if (eof()) fail("unterminated character class");
        if (peek() == ']') break;
        const char32_t lo = literal_char();
        char32_t hi = lo;
        if (i_ + 1 < s_.size() && peek() == '-' && s_[i_ + 1] != ']') {
          ++i_;
          hi = literal_char();
          if (hi < lo) fail("character range out of order");
        }
        r.emplace_back(lo, hi);
      }
      ++i_;
      r = normalize_ranges(std::move(r));
      if (negate) r = complement_ranges(r);
      if (r.empty()) fail("a character class that matches nothing");
      return Expr::chars(std::move(r));
    }
    if (c == '.') {
      ++i_;
      return Expr::chars({{0, 0x10FFFF}});
    }
    if (c == '(') {
      ++i_;
      Expr e = alternatives(true);
      skip_space();
      if (eof() || peek() != ')') fail("missing ')'");
      ++i_;
      return e;
    }
    if (name_char(c)) return Expr::ref(parse_name());
    fail(fmt::format("unexpected character '{}'", c));
  }
};

}  // namespace

ExprGrammar parse_gbnf(std::string_view text) { return GbnfParser(text).run(); }

}  // namespace fp4lm::engine::structured
