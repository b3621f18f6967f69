#include "engine/structured/byte_grammar.h"

#include <fmt/format.h>

#include <functional>
#include <unordered_map>

#include "engine/structured/grammar_error.h"
#include "engine/structured/utf8_ranges.h"

namespace fp4lm::engine::structured {

namespace {

using Seq = std::vector<ByteGrammar::Element>;

class Lowering {
 public:
  Lowering(const ExprGrammar& g, size_t max_elements) : g_(g), max_(max_elements) {}

  ByteGrammar run() {
    if (!g_.rules.count(g_.root)) throw GrammarError(fmt::format("grammar has no rule named '{}'", g_.root));
    // Named rules get indices first so references resolve in any order.
    for (const auto& name : g_.order) rule_index(name);
    for (const auto& name : g_.order) {
      const int32_t r = by_name_.at(name);
      current_ = name;
      alts_[static_cast<size_t>(r)] = lower_alts(g_.rules.at(name));
    }
    ByteGrammar out;
    out.sets = std::move(sets_);
    out.rule_names = names_;
    for (auto& alts : alts_) {
      std::vector<int32_t> starts;
      for (auto& seq : alts) {
        starts.push_back(static_cast<int32_t>(out.elements.size()));
        out.elements.insert(out.elements.end(), seq.begin(), seq.end());
        out.elements.push_back({ByteGrammar::Op::End, 0});
        if (out.elements.size() > max_)
          throw GrammarError(fmt::format("grammar too large: more than {} elements after expansion "
                                         "(large repetition counts or lengths?)",
                                         max_));
      }
      out.rule_alts.push_back(std::move(starts));
    }
    out.root = by_name_.at(g_.root);
    check_left_recursion(out);
    return out;
  }

 private:
  int32_t rule_index(const std::string& name) {
    auto it = by_name_.find(name);
    if (it != by_name_.end()) return it->second;
    const int32_t r = static_cast<int32_t>(names_.size());
    names_.push_back(name);
    alts_.emplace_back();
    by_name_[name] = r;
    return r;
  }
  int32_t new_rule(std::vector<Seq> alts) {
    const int32_t r = rule_index(fmt::format("{}_{}", current_, names_.size()));
    alts_[static_cast<size_t>(r)] = std::move(alts);
    return r;
  }
  int32_t set_index(const std::bitset<256>& s) {
    sets_.push_back(s);
    return static_cast<int32_t>(sets_.size() - 1);
  }
  void count(size_t n) {
    total_ += n;
    if (total_ > max_)
      throw GrammarError(fmt::format("grammar too large: more than {} elements after expansion "
                                     "(large repetition counts or lengths?)",
                                     max_));
  }

  std::vector<Seq> lower_alts(const Expr& e) {
    std::vector<Seq> out;
    if (e.kind == Expr::Kind::Alt) {
      for (const auto& x : e.items) {
        out.emplace_back();
        lower_into(x, out.back());
      }
    } else {
      out.emplace_back();
      lower_into(e, out.back());
    }
    return out;
  }

  // Appends to `seq` the elements matching `e`.
  void lower_into(const Expr& e, Seq& seq) {
    switch (e.kind) {
      case Expr::Kind::Bytes:
        count(e.text.size());
        for (unsigned char c : e.text) {
          std::bitset<256> s;
          s.set(c);
          seq.push_back({ByteGrammar::Op::Bytes, set_index(s)});
        }
        return;
      case Expr::Kind::Chars:
        return lower_chars(e, seq);
      case Expr::Kind::Seq:
        for (const auto& x : e.items) lower_into(x, seq);
        return;
      case Expr::Kind::Alt:
        count(1);
        seq.push_back({ByteGrammar::Op::Ref, new_rule(lower_alts(e))});
        return;
      case Expr::Kind::Ref:
        if (!g_.rules.count(e.text))
          throw GrammarError(fmt::format("rule '{}' refers to undefined rule '{}'", current_, e.text));
        count(1);
        seq.push_back({ByteGrammar::Op::Ref, by_name_.at(e.text)});
        return;
      case Expr::Kind::Repeat:
        return lower_repeat(e, seq);
    }
  }

  // A character class: its UTF-8 byte sequences. One-byte sequences merge into a single set;
  // longer ones become alternatives.
  void lower_chars(const Expr& e, Seq& seq) {
    const auto ranges = normalize_ranges(e.ranges);
    std::vector<ByteRangeSeq> seqs;
    for (const auto& [a, b] : ranges)
      for (auto& s : utf8_sequences(a, b)) seqs.push_back(std::move(s));
    if (seqs.empty()) throw GrammarError(fmt::format("rule '{}': a character class matches nothing", current_));
    std::bitset<256> single;
    std::vector<Seq> alts;
    for (const auto& s : seqs) {
      if (s.size() == 1) {
        for (int b = s[0].first; b <= s[0].second; ++b) single.set(static_cast<size_t>(b));
        continue;
      }
      Seq alt;
      for (const auto& [a, b] : s) {
        std::bitset<256> bs;
        for (int x = a; x <= b; ++x) bs.set(static_cast<size_t>(x));
        alt.push_back({ByteGrammar::Op::Bytes, set_index(bs)});
      }
      alts.push_back(std::move(alt));
    }
    count(1 + alts.size() * 3);
    if (alts.empty()) {
      seq.push_back({ByteGrammar::Op::Bytes, set_index(single)});
      return;
    }
    if (single.any()) alts.push_back({{ByteGrammar::Op::Bytes, set_index(single)}});
    seq.push_back({ByteGrammar::Op::Ref, new_rule(std::move(alts))});
  }

  // body{min,max}: the body `min` times, then R ::= unit R | "" when unbounded, else a chain of
  // (max - min) optional units.
  void lower_repeat(const Expr& e, Seq& seq) {
    const Expr& body = e.items.at(0);
    if (e.max >= 0 && e.max < e.min)
      throw GrammarError(fmt::format("rule '{}': repetition {{{},{}}} has max < min", current_, e.min, e.max));
    if (e.max == 0) return;
    // The body once, as a single element (a rule unless it already is one element).
    Seq one;
    lower_into(body, one);
    if (one.size() != 1) one = {{ByteGrammar::Op::Ref, new_rule({one})}};
    const auto unit = one[0];
    count(static_cast<size_t>(e.min) + 4);
    for (int64_t i = 0; i < e.min; ++i) seq.push_back(unit);
    if (e.max < 0) {
      if (nullable_expr(body))
        throw GrammarError(fmt::format("rule '{}': an unbounded repetition of an expression that can match "
                                       "the empty string is not supported",
                                       current_));
      const int32_t r = rule_index(fmt::format("{}_{}", current_, names_.size()));
      alts_[static_cast<size_t>(r)] = {{unit, {ByteGrammar::Op::Ref, r}}, {}};
      seq.push_back({ByteGrammar::Op::Ref, r});
      return;
    }
    if (e.max == e.min) return;
    // O_1 ::= unit | "", O_k ::= unit O_{k-1} | "".
    int32_t prev = -1;
    count(static_cast<size_t>(e.max - e.min) * 3);
    for (int64_t k = 1; k <= e.max - e.min; ++k) {
      Seq a = {unit};
      if (prev >= 0) a.push_back({ByteGrammar::Op::Ref, prev});
      prev = new_rule({a, {}});
    }
    seq.push_back({ByteGrammar::Op::Ref, prev});
  }

  // Conservative nullability on the expression level (named rules: through their bodies).
  bool nullable_expr(const Expr& e) {
    std::vector<std::string> seen;
    std::function<bool(const Expr&)> f = [&](const Expr& x) -> bool {
      switch (x.kind) {
        case Expr::Kind::Bytes: return x.text.empty();
        case Expr::Kind::Chars: return false;
        case Expr::Kind::Seq:
          for (const auto& y : x.items)
            if (!f(y)) return false;
          return true;
        case Expr::Kind::Alt:
          for (const auto& y : x.items)
            if (f(y)) return true;
          return false;
        case Expr::Kind::Repeat: return x.min == 0 || f(x.items.at(0));
        case Expr::Kind::Ref: {
          if (std::find(seen.begin(), seen.end(), x.text) != seen.end()) return false;
          seen.push_back(x.text);
          auto it = g_.rules.find(x.text);
          return it != g_.rules.end() && f(it->second);
        }
      }
      return false;
    };
    return f(e);
  }

  static void check_left_recursion(const ByteGrammar& g) {
    const size_t n = g.rule_alts.size();
    std::vector<char> nullable(n, 0);
    auto alt_nullable_upto = [&](int32_t pos, std::vector<int32_t>* left_refs) {
      for (;; ++pos) {
        const auto& el = g.elements[static_cast<size_t>(pos)];
        if (el.op == ByteGrammar::Op::End) return true;
        if (el.op == ByteGrammar::Op::Bytes) return false;
        if (left_refs) left_refs->push_back(el.arg);
        if (!nullable[static_cast<size_t>(el.arg)]) return false;
      }
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (int32_t a : g.rule_alts[r])
          if (alt_nullable_upto(a, nullptr)) {
            nullable[r] = 1;
            changed = true;
            break;
          }
      }
    }
    std::vector<std::vector<int32_t>> left(n);
    for (size_t r = 0; r < n; ++r)
      for (int32_t a : g.rule_alts[r]) alt_nullable_upto(a, &left[r]);
    std::vector<char> color(n, 0);  // 0 new, 1 on the DFS stack, 2 done
    std::function<void(size_t)> dfs = [&](size_t r) {
      color[r] = 1;
      for (int32_t s : left[r]) {
        const auto su = static_cast<size_t>(s);
        if (color[su] == 1)
          throw GrammarError(fmt::format("rule '{}' is left-recursive (it can reach itself without consuming "
                                         "input); rewrite it with repetition",
                                         g.rule_names[su]));
        if (color[su] == 0) dfs(su);
      }
      color[r] = 2;
    };
    for (size_t r = 0; r < n; ++r)
      if (color[r] == 0) dfs(r);
  }

  const ExprGrammar& g_;
  size_t max_;
  size_t total_ = 0;
  std::string current_;
  std::unordered_map<std::string, int32_t> by_name_;
  std::vector<std::string> names_;
  std::vector<std::vector<Seq>> alts_;
  std::vector<std::bitset<256>> sets_;
};

}  // namespace

ByteGrammar lower(const ExprGrammar& g, size_t max_elements) { return Lowering(g, max_elements).run(); }

}  // namespace fp4lm::engine::structured
