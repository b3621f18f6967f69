#pragma once
// JSON numbers by value range, as grammars: digit-range automata. The integers between two
// bounds written in decimal are a regular language (split by length, then digit by digit, as
// xgrammar and llguidance do), so a schema's minimum / maximum / exclusiveMinimum /
// exclusiveMaximum are enforced exactly, for bounds of any size. Integer literals are canonical
// (no leading zeros, no "-0"). Fractions ("-?I.F", no exponent) are enforced exactly too, with at
// most `max_digits` digits in all: a decimal of at most 15 significant digits reads back as a
// distinct double, so an output that is within the bound as a decimal stays within it for a
// validator that parses numbers as doubles (a strict bound stays strict).
#include <optional>
#include <string>
#include <string_view>

#include "engine/structured/expr.h"

namespace fp4lm::engine::structured {

// A decimal value: sign, integer digits (no leading zeros, "0" for zero) and fraction digits (no
// trailing zeros). Zero is not negative.
struct Decimal {
  bool negative = false;
  std::string int_digits = "0";
  std::string frac_digits;

  // "-12.50", "7", "0.001"; GrammarError when `text` is not a plain decimal.
  static Decimal parse(std::string_view text);
  // The double's exact value (every binary fraction is a finite decimal).
  static Decimal exact(double v);
  // The shortest decimal that reads back as `v` (what Python's repr prints).
  static Decimal shortest(double v);
  std::string str() const;
};

// -1, 0, 1 as a <, ==, > b.
int compare(const Decimal& a, const Decimal& b);

struct NumberBound {
  Decimal value;
  bool exclusive = false;
};

// Integer literals whose value lies within the bounds (an absent bound: unbounded); nullopt when
// no integer does.
std::optional<Expr> integer_range(const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi);

// Literals with a fraction part, "-?I.F" with 1 <= |F| and |I| + |F| <= max_digits, whose value
// lies within the bounds; nullopt when none does.
std::optional<Expr> fraction_range(const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi,
                                   int max_digits = 15);

}  // namespace fp4lm::engine::structured
