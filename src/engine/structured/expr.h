#pragma once
// The grammar every front end (JSON schema, regex, choice, GBNF) produces: named rules whose
// bodies are expressions over Unicode code points (character classes) and raw byte literals.
// grammar.h lowers it to a byte-level grammar.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fp4lm::engine::structured {

struct Expr {
  enum class Kind { Bytes, Chars, Seq, Alt, Repeat, Ref };
  Kind kind = Kind::Seq;
  std::string text;                                 // Bytes: the literal; Ref: the rule name
  std::vector<std::pair<char32_t, char32_t>> ranges;  // Chars: inclusive code point ranges
  std::vector<Expr> items;                          // Seq / Alt members; Repeat: the body (one)
  int64_t min = 0, max = -1;                        // Repeat bounds; max -1 = unbounded

  static Expr bytes(std::string s) {
    Expr e;
    e.kind = Kind::Bytes;
    e.text = std::move(s);
    return e;
  }
  static Expr chars(std::vector<std::pair<char32_t, char32_t>> r) {
    Expr e;
    e.kind = Kind::Chars;
    e.ranges = std::move(r);
    return e;
  }
  static Expr seq(std::vector<Expr> xs) {
    if (xs.size() == 1) return std::move(xs[0]);
    Expr e;
    e.kind = Kind::Seq;
    e.items = std::move(xs);
    return e;
  }
  static Expr alt(std::vector<Expr> xs) {
    if (xs.size() == 1) return std::move(xs[0]);
    Expr e;
    e.kind = Kind::Alt;
    e.items = std::move(xs);
    return e;
  }
  static Expr repeat(Expr body, int64_t lo, int64_t hi) {
    Expr e;
    e.kind = Kind::Repeat;
    e.items.push_back(std::move(body));
    e.min = lo;
    e.max = hi;
    return e;
  }
  static Expr ref(std::string name) {
    Expr e;
    e.kind = Kind::Ref;
    e.text = std::move(name);
    return e;
  }
  static Expr empty() { return seq({}); }
};

// Rules by name; `root` names the start rule. Rule names are what errors quote.
struct ExprGrammar {
  std::map<std::string, Expr> rules;
  std::vector<std::string> order;  // definition order (stable error messages)
  std::string root = "root";

  void define(const std::string& name, Expr body) {
    if (!rules.count(name)) order.push_back(name);
    rules[name] = std::move(body);
  }
};

}  // namespace fp4lm::engine::structured
