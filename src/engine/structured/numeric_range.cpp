#include "engine/structured/numeric_range.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <vector>

#include "engine/structured/grammar_error.h"

namespace fp4lm::engine::structured {

namespace {

// Magnitudes are canonical digit strings ("0", "17", no leading zeros).
std::string strip_leading(std::string s) {
  const size_t nz = s.find_first_not_of('0');
  return nz == std::string::npos ? "0" : s.substr(nz);
}

// 10^n ("1" and n zeros; built in place: GCC 12 misreports "1" + std::string as overlapping).
std::string pow10_str(size_t n) {
  std::string s(n + 1, '0');
  s[0] = '1';
  return s;
}

int cmp_mag(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

std::string inc_mag(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '9') {
      ++s[i];
      return s;
    }
    s[i] = '0';
  }
  s.insert(s.begin(), '1');
  return s;
}

std::string dec_mag(std::string s) {  // s > 0
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '0') {
      --s[i];
      break;
    }
    s[i] = '9';
  }
  return strip_leading(std::move(s));
}

// A signed integer.
struct Int {
  bool neg = false;
  std::string mag = "0";
};

Int make_int(bool neg, std::string mag) {
  mag = strip_leading(std::move(mag));
  return {neg && mag != "0", mag};
}

int cmp(const Int& a, const Int& b) {
  if (a.neg != b.neg) return a.neg ? -1 : 1;
  const int c = cmp_mag(a.mag, b.mag);
  return a.neg ? -c : c;
}

Int plus_one(const Int& x) { return x.neg ? make_int(true, dec_mag(x.mag)) : make_int(false, inc_mag(x.mag)); }
Int minus_one(const Int& x) {
  if (x.neg) return make_int(true, inc_mag(x.mag));
  return x.mag == "0" ? make_int(true, "1") : make_int(false, dec_mag(x.mag));
}

// floor / ceil of d * 10^shift.
Int shifted(const Decimal& d, size_t shift, bool ceil) {
  std::string frac = d.frac_digits;
  const bool rest = frac.size() > shift;  // nonzero: fraction digits carry no trailing zeros
  frac.resize(shift, '0');
  std::string mag = strip_leading(d.int_digits + frac);
  const bool up = rest && (ceil != d.negative);  // away from zero: ceil of a positive, floor of a negative
  if (up) mag = inc_mag(mag);
  return make_int(d.negative, mag);
}

// The smallest integer allowed by a lower bound, the largest by an upper one (at scale 10^shift).
Int lowest(const NumberBound& b, size_t shift) {
  return b.exclusive ? plus_one(shifted(b.value, shift, false)) : shifted(b.value, shift, true);
}
Int highest(const NumberBound& b, size_t shift) {
  return b.exclusive ? minus_one(shifted(b.value, shift, true)) : shifted(b.value, shift, false);
}

Expr digits(int lo, int hi) {
  return Expr::chars({{static_cast<char32_t>('0' + lo), static_cast<char32_t>('0' + hi)}});
}
Expr any_digits(int64_t lo, int64_t hi) { return Expr::repeat(digits(0, 9), lo, hi); }

// Renders magnitudes with a decimal point `frac` digits from the right (frac 0: none).
class RangeWriter {
 public:
  explicit RangeWriter(size_t frac) : f_(frac) {}

  // Equal-length digit strings lo <= hi (leading zeros kept): every string of that length
  // between them, digit by digit.
  Expr same_len(const std::string& lo, const std::string& hi) const {
    const size_t n = lo.size();
    if (n == 0) return Expr::empty();
    const std::string lrest = lo.substr(1), hrest = hi.substr(1);
    if (lo[0] == hi[0]) return Expr::seq({lead(digits(lo[0] - '0', lo[0] - '0'), n), same_len(lrest, hrest)});
    const bool low_full = lrest.find_first_not_of('0') == std::string::npos;
    const bool high_full = hrest.find_first_not_of('9') == std::string::npos;
    std::vector<Expr> alts;
    if (!low_full) alts.push_back(Expr::seq({lead(digits(lo[0] - '0', lo[0] - '0'), n), same_len(lrest, std::string(n - 1, '9'))}));
    const int a = lo[0] - '0' + (low_full ? 0 : 1), b = hi[0] - '0' - (high_full ? 0 : 1);
    if (a <= b) alts.push_back(Expr::seq({lead(digits(a, b), n), tail(n - 1)}));
    if (!high_full) alts.push_back(Expr::seq({lead(digits(hi[0] - '0', hi[0] - '0'), n), same_len(std::string(n - 1, '0'), hrest)}));
    return Expr::alt(std::move(alts));
  }

  // Canonical magnitudes in [a, b] (b empty: unbounded), each at least 10^f_ when f_ > 0.
  void canonical(const std::string& a, const std::string& b, std::vector<Expr>& out) const {
    const size_t la = a.size();
    if (!b.empty() && b.size() == la) {
      out.push_back(same_len(a, b));
      return;
    }
    out.push_back(same_len(a, std::string(la, '9')));
    // Every length strictly between: [1-9] then x digits (then the fraction), 1 + x + f_ = length.
    const int64_t x_lo = static_cast<int64_t>(la) - static_cast<int64_t>(f_);
    const int64_t x_hi = b.empty() ? -1 : static_cast<int64_t>(b.size()) - 2 - static_cast<int64_t>(f_);
    if (b.empty() || x_lo <= x_hi) {
      std::vector<Expr> piece = {digits(1, 9), any_digits(x_lo, x_hi)};
      if (f_ > 0) {
        piece.push_back(Expr::bytes("."));
        piece.push_back(any_digits(static_cast<int64_t>(f_), static_cast<int64_t>(f_)));
      }
      out.push_back(Expr::seq(std::move(piece)));
    }
    if (!b.empty()) out.push_back(same_len(pow10_str(b.size() - 1), b));
  }

  // Non-negative magnitudes in [a, b] (b empty: unbounded), a <= b.
  void magnitudes(const std::string& a, const std::string& b, std::vector<Expr>& out) const {
    if (f_ == 0) return canonical(a, b, out);
    const std::string one = pow10_str(f_);  // 10^f: below it the form is "0.ddd"
    if (cmp_mag(a, one) < 0) {
      const std::string top = !b.empty() && cmp_mag(b, one) < 0 ? b : std::string(f_, '9');
      out.push_back(Expr::seq({Expr::bytes("0."), same_len(pad(a), pad(top))}));
      if (!b.empty() && cmp_mag(b, one) < 0) return;
    }
    canonical(cmp_mag(a, one) < 0 ? one : a, b, out);
  }

  // Signed values in [lo, hi] (absent: unbounded); appends nothing when the range is empty.
  void signed_values(const std::optional<Int>& lo, const std::optional<Int>& hi, std::vector<Expr>& out) const {
    if (lo && hi && cmp(*lo, *hi) > 0) return;
    // Negative values -m, m in [max(1, -hi), -lo].
    if (!lo || lo->neg) {
      const std::string a = hi && hi->neg ? hi->mag : "1";
      const std::string b = lo ? lo->mag : "";
      std::vector<Expr> neg;
      magnitudes(a, b, neg);
      out.push_back(Expr::seq({Expr::bytes("-"), Expr::alt(std::move(neg))}));
    }
    if (!hi || !hi->neg) magnitudes(lo && !lo->neg ? lo->mag : "0", hi ? hi->mag : "", out);
  }

 private:
  // A leading digit of an n-digit string, and the point when f_ digits follow it.
  Expr lead(Expr d, size_t n) const {
    if (f_ > 0 && n - 1 == f_) return Expr::seq({std::move(d), Expr::bytes(".")});
    return d;
  }
  // Any `count` digits, the point among them where it falls.
  Expr tail(size_t count) const {
    if (f_ > 0 && count > f_)
      return Expr::seq({any_digits(static_cast<int64_t>(count - f_), static_cast<int64_t>(count - f_)), Expr::bytes("."),
                        any_digits(static_cast<int64_t>(f_), static_cast<int64_t>(f_))});
    if (count == 0) return Expr::empty();
    return any_digits(static_cast<int64_t>(count), static_cast<int64_t>(count));
  }
  std::string pad(const std::string& m) const { return std::string(f_ - m.size(), '0') + m; }

  size_t f_;
};

std::optional<Expr> alternatives(std::vector<Expr> alts) {
  if (alts.empty()) return std::nullopt;
  return Expr::alt(std::move(alts));
}

Decimal canonical_decimal(bool negative, std::string int_digits, std::string frac) {
  Decimal d;
  d.int_digits = strip_leading(std::move(int_digits));
  const size_t last = frac.find_last_not_of('0');
  d.frac_digits = last == std::string::npos ? "" : frac.substr(0, last + 1);
  d.negative = negative && (d.int_digits != "0" || !d.frac_digits.empty());
  return d;
}

}  // namespace

Decimal Decimal::parse(std::string_view text) {
  const std::string_view whole = text;
  bool neg = false;
  if (!text.empty() && text[0] == '-') {
    neg = true;
    text.remove_prefix(1);
  }
  const size_t dot = text.find('.');
  const std::string_view ip = text.substr(0, dot);
  const std::string_view fp = dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
  auto all_digits = [](std::string_view s) { return s.find_first_not_of("0123456789") == std::string_view::npos; };
  if (ip.empty() || !all_digits(ip) || !all_digits(fp) || (dot != std::string_view::npos && fp.empty()))
    throw GrammarError(fmt::format("'{}' is not a decimal number", whole));
  return canonical_decimal(neg, std::string(ip), std::string(fp));
}

Decimal Decimal::exact(double v) {
  if (!std::isfinite(v)) throw GrammarError("a bound must be a finite number");
  // 1100 fraction digits hold any double's binary fraction (at most 1074 places).
  return parse(fmt::format("{:.1100f}", v));
}

Decimal Decimal::shortest(double v) {
  if (!std::isfinite(v)) throw GrammarError("a bound must be a finite number");
  char buf[512];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  if (r.ec != std::errc()) throw GrammarError("a bound could not be formatted");
  return parse(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
}

std::string Decimal::str() const {
  return (negative ? "-" : "") + int_digits + (frac_digits.empty() ? "" : "." + frac_digits);
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int c = cmp_mag(a.int_digits, b.int_digits);
  if (c == 0) c = a.frac_digits < b.frac_digits ? -1 : a.frac_digits > b.frac_digits ? 1 : 0;  // no trailing zeros
  return a.negative ? -c : c;
}

std::optional<Expr> integer_range(const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi) {
  std::optional<Int> a, b;
  if (lo) a = lowest(*lo, 0);
  if (hi) b = highest(*hi, 0);
  std::vector<Expr> alts;
  RangeWriter(0).signed_values(a, b, alts);
  return alternatives(std::move(alts));
}

std::optional<Expr> fraction_range(const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi,
                                   int max_digits) {
  std::vector<Expr> alts;
  const Int cap_hi = make_int(false, std::string(static_cast<size_t>(max_digits), '9'));
  const Int cap_lo = make_int(true, cap_hi.mag);
  for (size_t f = 1; f < static_cast<size_t>(max_digits); ++f) {
    // The literal I.F with |F| = f is N / 10^f for the integer N its digits spell.
    Int a = lo ? lowest(*lo, f) : cap_lo, b = hi ? highest(*hi, f) : cap_hi;
    if (cmp(a, cap_lo) < 0) a = cap_lo;
    if (cmp(b, cap_hi) > 0) b = cap_hi;
    RangeWriter(f).signed_values(a, b, alts);
  }
  return alternatives(std::move(alts));
}

}  // namespace fp4lm::engine::structured
