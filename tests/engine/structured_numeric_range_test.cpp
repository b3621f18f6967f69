// Digit-range automata (numeric_range.h) against brute-force enumeration: every literal in a
// window is accepted iff its value lies within the bounds, for integer and decimal bounds,
// inclusive and exclusive, negative, zero and huge ones.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "engine/structured/automaton.h"
#include "engine/structured/byte_grammar.h"
#include "engine/structured/grammar_error.h"
#include "engine/structured/numeric_range.h"

namespace fp4lm::engine::structured::structured_numeric_range_test {
namespace {

bool accepts(Automaton& a, const std::string& text) {
  int32_t s = a.initial();
  for (unsigned char c : text) {
    s = a.next(s, c);
    if (s == Automaton::kDead) return false;
  }
  return a.accepting(s);
}

Automaton of(const std::optional<Expr>& e) {
  EXPECT_TRUE(e.has_value());
  ExprGrammar g;
  g.define("root", e ? *e : Expr::bytes("\x01"));
  return Automaton(lower(g));
}

std::optional<NumberBound> bound(const std::string& v, bool exclusive = false) {
  return NumberBound{Decimal::parse(v), exclusive};
}

// Reference comparison of integer literals (sign, length, digits): independent of the code under test.
int cmp_int(const std::string& a, const std::string& b) {
  const bool na = a[0] == '-', nb = b[0] == '-';
  if (na != nb) return na ? -1 : 1;
  const std::string ma = na ? a.substr(1) : a, mb = nb ? b.substr(1) : b;
  int c = ma.size() != mb.size() ? (ma.size() < mb.size() ? -1 : 1) : ma.compare(mb) < 0 ? -1 : ma.compare(mb) > 0 ? 1 : 0;
  return na ? -c : c;
}

TEST(StructuredNumericRange, EveryIntegerInAWindowAgainstBruteForce) {
  struct Case {
    std::optional<int64_t> lo, hi;
    bool lo_ex, hi_ex;
  };
  const Case cases[] = {
      {0, 120, false, false},    {-1000, 1000, false, false}, {-37, 512, true, true}, {-999, -100, false, false},
      {-5, -5, false, false},    {1, 9, false, false},        {10, 99, false, true},  {-1, 0, true, false},
      {std::nullopt, 17, false, false}, {-250, std::nullopt, false, false}, {std::nullopt, -3, false, true},
      {99, std::nullopt, true, false}, {0, 0, false, false}, {-100, 100, true, true}, {-10, 1000, false, false},
  };
  for (const Case& c : cases) {
    auto a = of(integer_range(c.lo ? bound(std::to_string(*c.lo), c.lo_ex) : std::nullopt,
                              c.hi ? bound(std::to_string(*c.hi), c.hi_ex) : std::nullopt));
    for (int64_t x = -1000; x <= 1000; ++x) {
      const bool in = (!c.lo || (c.lo_ex ? x > *c.lo : x >= *c.lo)) && (!c.hi || (c.hi_ex ? x < *c.hi : x <= *c.hi));
      ASSERT_EQ(accepts(a, std::to_string(x)), in) << x << " in [" << (c.lo ? *c.lo : -99999) << ", "
                                                   << (c.hi ? *c.hi : 99999) << "]";
    }
    // Never a non-canonical literal.
    for (const char* t : {"-0", "00", "01", "-01", "+1", "", "-", "1.0", "1e2"}) EXPECT_FALSE(accepts(a, t)) << t;
  }
}

TEST(StructuredNumericRange, FractionalBoundsOnIntegersRoundInward) {
  auto a = of(integer_range(bound("-2.5"), bound("7.01")));  // -2 .. 7
  for (int x = -20; x <= 20; ++x) EXPECT_EQ(accepts(a, std::to_string(x)), x >= -2 && x <= 7) << x;
  auto b = of(integer_range(bound("-3", true), bound("3", true)));  // -2 .. 2
  for (int x = -20; x <= 20; ++x) EXPECT_EQ(accepts(b, std::to_string(x)), x >= -2 && x <= 2) << x;
  EXPECT_FALSE(integer_range(bound("0.2"), bound("0.8")).has_value());
  EXPECT_FALSE(integer_range(bound("5"), bound("5", true)).has_value());
  EXPECT_FALSE(integer_range(bound("7"), bound("3")).has_value());
}

TEST(StructuredNumericRange, RandomHugeRangesAgainstBigComparison) {
  std::mt19937_64 rng(41);
  auto random_int = [&](size_t max_len) {
    const size_t len = 1 + rng() % max_len;
    std::string s(1, static_cast<char>('1' + rng() % 9));
    for (size_t i = 1; i < len; ++i) s += static_cast<char>('0' + rng() % 10);
    if (len == 1 && rng() % 5 == 0) s = "0";
    if (s != "0" && rng() % 2) s = "-" + s;
    return s;
  };
  for (int round = 0; round < 40; ++round) {
    std::string lo = random_int(40), hi = random_int(40);
    if (cmp_int(lo, hi) > 0) std::swap(lo, hi);
    const bool lo_ex = rng() % 2, hi_ex = rng() % 2;
    if (lo == hi && (lo_ex || hi_ex)) continue;
    const auto e = integer_range(bound(lo, lo_ex), bound(hi, hi_ex));
    std::optional<Automaton> a;
    if (e) a.emplace(of(e));
    std::vector<std::string> probes = {lo, hi};
    for (int i = 0; i < 300; ++i) probes.push_back(random_int(42));
    // Neighbours of the bounds: the same digits with one digit changed.
    for (const std::string& b : {lo, hi})
      for (size_t i = b[0] == '-' ? 1 : 0; i < b.size(); ++i)
        for (char d : {'0', '9'}) {
          std::string p = b;
          p[i] = d;
          if (p[p[0] == '-' ? 1 : 0] != '0' || p.size() == (p[0] == '-' ? 2u : 1u)) probes.push_back(p);
        }
    for (const std::string& x : probes) {
      if (x == "-0") continue;
      const bool in = (lo_ex ? cmp_int(x, lo) > 0 : cmp_int(x, lo) >= 0) && (hi_ex ? cmp_int(x, hi) < 0 : cmp_int(x, hi) <= 0);
      if (!e) {  // no integer in range: only possible for neighbours with exclusive bounds
        ASSERT_FALSE(in) << x;
        continue;
      }
      ASSERT_EQ(accepts(*a, x), in) << x << " in " << (lo_ex ? "(" : "[") << lo << ", " << hi << (hi_ex ? ")" : "]");
    }
  }
}

// Every decimal with 1..3 fraction digits in [-30, 30], as thousandths, against the bounds.
TEST(StructuredNumericRange, FractionsInAWindowAgainstBruteForce) {
  struct Case {
    const char *lo, *hi;
    bool lo_ex, hi_ex;
    int64_t lo_milli, hi_milli;  // the bounds in thousandths
  };
  const Case cases[] = {
      {"0", "1", false, true, 0, 1000},        {"-2.5", "2.5", true, false, -2500, 2500},
      {"-12.25", "-0.125", false, false, -12250, -125}, {"0.1", "0.3", true, true, 100, 300},
      {"-30", "30", false, false, -30000, 30000},  {"7.5", "7.5", false, false, 7500, 7500},
  };
  for (const Case& c : cases) {
    auto a = of(fraction_range(bound(c.lo, c.lo_ex), bound(c.hi, c.hi_ex)));
    for (int64_t v = -30000; v <= 30000; ++v)
      for (int f = 1; f <= 3; ++f) {
        const int64_t scale = f == 1 ? 100 : f == 2 ? 10 : 1;
        if (v % scale != 0) continue;
        const int64_t m = std::llabs(v) / scale;  // the literal's digits without the point
        std::string digits = std::to_string(m);
        if (digits.size() <= static_cast<size_t>(f)) digits = std::string(static_cast<size_t>(f) + 1 - digits.size(), '0') + digits;
        const std::string text = (v < 0 ? "-" : "") + digits.substr(0, digits.size() - static_cast<size_t>(f)) + "." +
                                 digits.substr(digits.size() - static_cast<size_t>(f));
        const bool in = (c.lo_ex ? v > c.lo_milli : v >= c.lo_milli) && (c.hi_ex ? v < c.hi_milli : v <= c.hi_milli);
        ASSERT_EQ(accepts(a, text), in) << text;
      }
    for (const char* t : {"-0.0", "00.5", "1.", ".5", "1e1", "5"}) EXPECT_FALSE(accepts(a, t)) << t;
  }
}

TEST(StructuredNumericRange, FractionsHaveAtMostMaxDigits) {
  auto a = of(fraction_range(bound("0"), bound("100", true), 6));
  EXPECT_TRUE(accepts(a, "99.9999"));
  EXPECT_FALSE(accepts(a, "99.99999"));   // 7 digits
  EXPECT_TRUE(accepts(a, "0.00001"));     // 6 digits
  EXPECT_FALSE(accepts(a, "0.000001"));
  EXPECT_FALSE(accepts(a, "100.0"));
  EXPECT_FALSE(fraction_range(bound("0.5", true), bound("0.5", true)).has_value());
}

TEST(StructuredNumericRange, DecimalsOfDoubles) {
  EXPECT_EQ(Decimal::shortest(0.1).str(), "0.1");
  EXPECT_EQ(Decimal::exact(0.1).str(), "0.1000000000000000055511151231257827021181583404541015625");
  EXPECT_EQ(Decimal::shortest(-2.5e-3).str(), "-0.0025");
  EXPECT_EQ(Decimal::shortest(1e20).str(), "100000000000000000000");
  EXPECT_EQ(Decimal::exact(-0.0).str(), "0");
  EXPECT_EQ(Decimal::parse("-007.500").str(), "-7.5");
  EXPECT_THROW(Decimal::parse("1e5"), GrammarError);
  EXPECT_THROW(Decimal::parse("1."), GrammarError);
  EXPECT_LT(compare(Decimal::parse("0.45"), Decimal::parse("0.5")), 0);
  EXPECT_GT(compare(Decimal::parse("-0.45"), Decimal::parse("-0.5")), 0);
  EXPECT_EQ(compare(Decimal::parse("12.0"), Decimal::parse("12")), 0);
}

}  // namespace
}  // namespace fp4lm::engine::structured::structured_numeric_range_test
