#include "tokenizer/jinja/parser.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tokenizer/jinja/lexer.h"

namespace fp4lm::tokenizer::jinja {
namespace {

// Statement tags this parser understands; any other `{% name` is "unsupported".
bool is_end_tag(const std::string& n) {
  return n == "endif" || n == "endfor" || n == "endset" || n == "endmacro" || n == "elif" ||
         n == "else" || n == "endgeneration" || n == "endraw";
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

  Program run() {
    Program p;
    std::string ender;
    p.body = parse_body({}, ender, {}, "");
    return p;
  }

 private:
  struct DepthGuard {
    Parser& p;
    DepthGuard(Parser& parser, const Token& at) : p(parser) {
      if (++p.depth_ > kMaxParseDepth)
        throw TemplateError(at.pos, fmt::format("template nested deeper than {} levels", kMaxParseDepth));
    }
    ~DepthGuard() { --p.depth_; }
  };

  const Token& peek(size_t k = 0) const {
    size_t j = std::min(i_ + k, toks_.size() - 1);
    return toks_[j];
  }
  const Token& next() {
    const Token& t = toks_[i_];
    if (i_ + 1 < toks_.size()) ++i_;
    return t;
  }
  bool at_op(const char* op, size_t k = 0) const {
    return peek(k).kind == TokenKind::Operator && peek(k).text == op;
  }
  bool at_name(const char* name, size_t k = 0) const {
    return peek(k).kind == TokenKind::Name && peek(k).text == name;
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::Text: return "template text";
      case TokenKind::Name: return "'" + t.text + "'";
      case TokenKind::String: return "string literal";
      case TokenKind::Integer:
      case TokenKind::Float: return "number '" + t.text + "'";
      case TokenKind::Operator: return "'" + t.text + "'";
      default: return token_kind_name(t.kind);
    }
  }

  [[noreturn]] void unexpected(const Token& t, const std::string& expected) const {
    throw TemplateError(t.pos, fmt::format("unexpected {}, expected {}", describe(t), expected));
  }

  const Token& expect_op(const char* op) {
    if (!at_op(op)) unexpected(peek(), fmt::format("'{}'", op));
    return next();
  }
  void expect_kind(TokenKind k) {
    if (peek().kind != k) unexpected(peek(), token_kind_name(k));
    next();
  }
  std::string expect_name(const char* what) {
    if (peek().kind != TokenKind::Name) unexpected(peek(), what);
    return next().text;
  }

  // Statements until one of `enders` opens a block tag (its name is consumed and returned in
  // `ender`) or, when `enders` is empty, until the end of the template.
  Body parse_body(std::initializer_list<const char*> enders, std::string& ender, Pos opener,
                  const char* opener_name) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::End) {
        if (enders.size() == 0) return body;
        throw TemplateError(opener, fmt::format("'{{% {} %}}' is never closed (expected '{{% {} %}}')",
                                                opener_name, *(enders.end() - 1)));
      }
      if (t.kind == TokenKind::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Text;
        s->pos = t.pos;
        s->text = next().text;
        body.push_back(std::move(s));
        continue;
      }
      if (t.kind == TokenKind::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Output;
        s->pos = t.pos;
        s->expr = parse_tuple(true);
        expect_kind(TokenKind::VarEnd);
        body.push_back(std::move(s));
        continue;
      }
      if (t.kind != TokenKind::BlockBegin) unexpected(t, "text or a tag");
      const Token& name = peek(1);
      if (name.kind == TokenKind::Name) {
        for (const char* e : enders)
          if (name.text == e) {
            next();
            ender = next().text;
            return body;
          }
      }
      next();
      body.push_back(parse_statement());
    }
  }

  StmtPtr parse_statement() {
    const Token& t = peek();
    DepthGuard guard(*this, t);
    if (t.kind != TokenKind::Name) unexpected(t, "a statement name");
    const std::string& n = t.text;
    auto s = std::make_unique<Stmt>();
    s->pos = t.pos;
    if (n == "if") return parse_if(std::move(s));
    if (n == "for") return parse_for(std::move(s));
    if (n == "set") return parse_set(std::move(s));
    if (n == "macro") return parse_macro(std::move(s));
    if (n == "break" || n == "continue") {
      next();
      s->kind = n == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
      expect_kind(TokenKind::BlockEnd);
      return s;
    }
    if (n == "generation") {  // Hugging Face's AssistantTracker extension: renders its body
      next();
      expect_kind(TokenKind::BlockEnd);
      s->kind = Stmt::Kind::Scope;
      std::string ender;
      s->body = parse_body({"endgeneration"}, ender, s->pos, "generation");
      expect_kind(TokenKind::BlockEnd);
      return s;
    }
    if (is_end_tag(n)) throw TemplateError(t.pos, fmt::format("unexpected '{{% {} %}}'", n));
    throw TemplateError(t.pos, fmt::format("unsupported tag '{{% {} %}}'", n));
  }

  StmtPtr parse_if(StmtPtr s) {
    next();
    s->kind = Stmt::Kind::If;
    s->conds.push_back(parse_tuple(true));
    expect_kind(TokenKind::BlockEnd);
    while (true) {
      std::string ender;
      s->bodies.push_back(parse_body({"elif", "else", "endif"}, ender, s->pos, "if"));
      if (ender == "elif") {
        s->conds.push_back(parse_tuple(true));
        expect_kind(TokenKind::BlockEnd);
        continue;
      }
      if (ender == "else") {
        expect_kind(TokenKind::BlockEnd);
        s->else_body = parse_body({"endif"}, ender, s->pos, "if");
      }
      expect_kind(TokenKind::BlockEnd);
      return s;
    }
  }

  StmtPtr parse_for(StmtPtr s) {
    next();
    s->kind = Stmt::Kind::For;
    bool paren = at_op("(");
    if (paren) next();
    s->targets.push_back(expect_name("a loop variable"));
    while (at_op(",")) {
      next();
      s->targets.push_back(expect_name("a loop variable"));
    }
    if (paren) expect_op(")");
    if (!at_name("in")) unexpected(peek(), "'in'");
    next();
    s->expr = parse_tuple(false);
    if (at_name("if")) {
      next();
      s->cond = parse_expression(true);
    }
    if (at_name("recursive"))
      throw TemplateError(peek().pos, "recursive loops are not supported");
    expect_kind(TokenKind::BlockEnd);
    std::string ender;
    s->body = parse_body({"else", "endfor"}, ender, s->pos, "for");
    if (ender == "else") {
      expect_kind(TokenKind::BlockEnd);
      s->else_body = parse_body({"endfor"}, ender, s->pos, "for");
    }
    expect_kind(TokenKind::BlockEnd);
    return s;
  }

  StmtPtr parse_set(StmtPtr s) {
    next();
    s->targets.push_back(expect_name("a variable name"));
    if (at_op(".")) {
      next();
      s->attr = expect_name("an attribute name");
    } else {
      while (at_op(",")) {
        next();
        s->targets.push_back(expect_name("a variable name"));
      }
    }
    if (at_op("=")) {
      next();
      s->kind = Stmt::Kind::Set;
      s->expr = parse_tuple(true);
      expect_kind(TokenKind::BlockEnd);
      return s;
    }
    if (peek().kind != TokenKind::BlockEnd || s->targets.size() != 1 || !s->attr.empty())
      unexpected(peek(), "'='");
    next();
    s->kind = Stmt::Kind::SetBlock;
    std::string ender;
    s->body = parse_body({"endset"}, ender, s->pos, "set");
    expect_kind(TokenKind::BlockEnd);
    return s;
  }

  StmtPtr parse_macro(StmtPtr s) {
    next();
    s->kind = Stmt::Kind::Macro;
    s->targets.push_back(expect_name("a macro name"));
    expect_op("(");
    while (!at_op(")")) {
      std::string p = expect_name("a parameter name");
      ExprPtr def;
      if (at_op("=")) {
        next();
        def = parse_expression(true);
      }
      s->params.emplace_back(std::move(p), std::move(def));
      if (!at_op(",")) break;
      next();
    }
    expect_op(")");
    expect_kind(TokenKind::BlockEnd);
    std::string ender;
    s->body = parse_body({"endmacro"}, ender, s->pos, "macro");
    if (peek().kind == TokenKind::Name) next();  // {% endmacro name %}
    expect_kind(TokenKind::BlockEnd);
    return s;
  }

  // ---- expressions ----

  ExprPtr make(Expr::Kind k, Pos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = pos;
    return e;
  }

  // Records the height of a finished node; long operator chains (a + b + c + ...) are built
  // by loops, not recursion, so the height is checked here rather than by DepthGuard.
  ExprPtr seal(ExprPtr e) {
    int h = 0;
    auto take = [&](const ExprPtr& c) {
      if (c) h = std::max(h, c->height);
    };
    take(e->a);
    take(e->b);
    take(e->c);
    for (const auto& c : e->items) take(c);
    for (const auto& c : e->keys) take(c);
    for (const auto& kv : e->kwargs) take(kv.second);
    e->height = h + 1;
    if (e->height > kMaxParseDepth)
      throw TemplateError(e->pos, fmt::format("expression nested deeper than {} levels", kMaxParseDepth));
    return e;
  }

  ExprPtr binary(Expr::Kind k, const std::string& op, Pos pos, ExprPtr a, ExprPtr b) {
    auto e = make(k, pos);
    e->name = op;
    e->a = std::move(a);
    e->b = std::move(b);
    return seal(std::move(e));
  }

  // An expression, or a tuple (a, b, ...) written without parentheses.
  ExprPtr parse_tuple(bool with_condexpr) {
    Pos pos = peek().pos;
    ExprPtr first = parse_expression(with_condexpr);
    if (!at_op(",")) return first;
    auto list = make(Expr::Kind::List, pos);
    list->name = "tuple";
    list->items.push_back(std::move(first));
    while (at_op(",")) {
      next();
      if (peek().kind == TokenKind::BlockEnd || peek().kind == TokenKind::VarEnd) break;
      list->items.push_back(parse_expression(with_condexpr));
    }
    return seal(std::move(list));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this, peek());
    if (!with_condexpr) return parse_or();
    ExprPtr a = parse_or();
    while (at_name("if")) {
      Pos pos = next().pos;
      auto e = make(Expr::Kind::Cond, pos);
      e->a = std::move(a);
      e->b = parse_or();
      if (at_name("else")) {
        next();
        e->c = parse_expression(true);
      }
      a = seal(std::move(e));
    }
    return a;
  }

  ExprPtr parse_or() {
    ExprPtr a = parse_and();
    while (at_name("or")) {
      Pos pos = next().pos;
      a = binary(Expr::Kind::Or, "or", pos, std::move(a), parse_and());
    }
    return a;
  }

  ExprPtr parse_and() {
    ExprPtr a = parse_not();
    while (at_name("and")) {
      Pos pos = next().pos;
      a = binary(Expr::Kind::And, "and", pos, std::move(a), parse_not());
    }
    return a;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      DepthGuard guard(*this, peek());
      Pos pos = next().pos;
      auto e = make(Expr::Kind::Unary, pos);
      e->name = "not";
      e->a = parse_not();
      return seal(std::move(e));
    }
    return parse_compare();
  }

  bool at_compare_op() const {
    if (peek().kind == TokenKind::Operator) {
      const std::string& t = peek().text;
      return t == "==" || t == "!=" || t == "<" || t == "<=" || t == ">" || t == ">=";
    }
    return at_name("in") || (at_name("not") && at_name("in", 1));
  }

  ExprPtr parse_compare() {
    ExprPtr a = parse_math1();
    if (!at_compare_op()) return a;
    Pos pos = peek().pos;
    std::string op = next().text;
    if (op == "not") {
      next();
      op = "not in";
    }
    a = binary(Expr::Kind::Binary, op, pos, std::move(a), parse_math1());
    if (at_compare_op())
      throw TemplateError(peek().pos, "chained comparisons are not supported; use 'and'");
    return a;
  }

  ExprPtr parse_math1() {
    ExprPtr a = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& t = next();
      a = binary(Expr::Kind::Binary, t.text, t.pos, std::move(a), parse_concat());
    }
    return a;
  }

  ExprPtr parse_concat() {
    ExprPtr a = parse_math2();
    while (at_op("~")) {
      const Token& t = next();
      a = binary(Expr::Kind::Binary, "~", t.pos, std::move(a), parse_math2());
    }
    return a;
  }

  ExprPtr parse_math2() {
    ExprPtr a = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& t = next();
      a = binary(Expr::Kind::Binary, t.text, t.pos, std::move(a), parse_pow());
    }
    return a;
  }

  ExprPtr parse_pow() {
    ExprPtr a = parse_unary(true);
    while (at_op("**")) {
      const Token& t = next();
      a = binary(Expr::Kind::Binary, "**", t.pos, std::move(a), parse_unary(true));
    }
    return a;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this, peek());
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      const Token& t = next();
      node = make(Expr::Kind::Unary, t.pos);
      node->name = t.text;
      node->a = parse_unary(false);
      node = seal(std::move(node));
    } else {
      node = parse_postfix(parse_primary());
    }
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr literal(Pos pos, Value v) {
    auto e = make(Expr::Kind::Literal, pos);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case TokenKind::Name: {
        next();
        const std::string& n = t.text;
        if (n == "true" || n == "True") return literal(t.pos, Value(true));
        if (n == "false" || n == "False") return literal(t.pos, Value(false));
        if (n == "none" || n == "None") return literal(t.pos, Value(None{}));
        auto e = make(Expr::Kind::Name, t.pos);
        e->name = n;
        return e;
      }
      case TokenKind::String: {
        std::string s = next().text;
        while (peek().kind == TokenKind::String) s += next().text;  // "a" "b" -> "ab"
        return literal(t.pos, Value(std::move(s)));
      }
      case TokenKind::Integer: {
        next();
        errno = 0;
        char* end = nullptr;
        long long v = std::strtoll(t.text.c_str(), &end, 10);
        if (errno == ERANGE) throw TemplateError(t.pos, "integer literal out of range");
        return literal(t.pos, Value(static_cast<int64_t>(v)));
      }
      case TokenKind::Float: {
        next();
        return literal(t.pos, Value(std::strtod(t.text.c_str(), nullptr)));
      }
      case TokenKind::Operator:
        if (t.text == "(") {
          next();
          if (at_op(")")) {
            next();
            auto empty = make(Expr::Kind::List, t.pos);
            empty->name = "tuple";
            return empty;
          }
          ExprPtr first = parse_expression(true);
          if (at_op(",")) {
            auto list = make(Expr::Kind::List, t.pos);
            list->name = "tuple";
            list->items.push_back(std::move(first));
            while (at_op(",")) {
              next();
              if (at_op(")")) break;
              list->items.push_back(parse_expression(true));
            }
            first = seal(std::move(list));
          }
          expect_op(")");
          return first;
        }
        if (t.text == "[") {
          next();
          auto list = make(Expr::Kind::List, t.pos);
          while (!at_op("]")) {
            list->items.push_back(parse_expression(true));
            if (!at_op(",")) break;
            next();
          }
          expect_op("]");
          return seal(std::move(list));
        }
        if (t.text == "{") {
          next();
          auto dict = make(Expr::Kind::Dict, t.pos);
          while (!at_op("}")) {
            dict->keys.push_back(parse_expression(true));
            expect_op(":");
            dict->items.push_back(parse_expression(true));
            if (!at_op(",")) break;
            next();
          }
          expect_op("}");
          return seal(std::move(dict));
        }
        break;
      default:
        break;
    }
    unexpected(t, "an expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_op(".")) {
        const Token& dot = next();
        const Token& t = peek();
        if (t.kind == TokenKind::Name) {
          next();
          auto e = make(Expr::Kind::Attr, dot.pos);
          e->name = t.text;
          e->a = std::move(node);
          node = seal(std::move(e));
        } else if (t.kind == TokenKind::Integer) {  // x.0 is x[0]
          next();
          auto e = make(Expr::Kind::Item, dot.pos);
          e->a = std::move(node);
          e->b = literal(t.pos, Value(static_cast<int64_t>(std::strtoll(t.text.c_str(), nullptr, 10))));
          node = seal(std::move(e));
        } else {
          unexpected(t, "an attribute name");
        }
      } else if (at_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& open = next();
    DepthGuard guard(*this, open);
    ExprPtr start, stop, step;
    bool is_slice = false;
    if (!at_op(":")) start = parse_expression(true);
    if (at_op(":")) {
      is_slice = true;
      next();
      if (!at_op("]") && !at_op(":")) stop = parse_expression(true);
      if (at_op(":")) {
        next();
        if (!at_op("]")) step = parse_expression(true);
      }
    }
    expect_op("]");
    auto e = make(is_slice ? Expr::Kind::Slice : Expr::Kind::Item, open.pos);
    e->a = std::move(node);
    e->b = std::move(start);
    if (is_slice) {
      e->c = std::move(stop);
      e->items.push_back(std::move(step));
    }
    return seal(std::move(e));
  }

  // Parses "(args)" into e->items / e->kwargs.
  void parse_args(Expr& e) {
    expect_op("(");
    while (!at_op(")")) {
      if (peek().kind == TokenKind::Name && at_op("=", 1)) {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty())
          throw TemplateError(peek().pos, "positional argument after keyword argument");
        e.items.push_back(parse_expression(true));
      }
      if (!at_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    DepthGuard guard(*this, peek());
    auto e = make(Expr::Kind::Call, peek().pos);
    e->a = std::move(node);
    parse_args(*e);
    return seal(std::move(e));
  }

  bool at_test_argument() const {
    const Token& t = peek();
    if (t.kind == TokenKind::Name) {
      static const char* stop[] = {"else", "or", "and", "if", "in", "is", "not"};
      for (const char* s : stop)
        if (t.text == s) return false;
      return true;
    }
    return t.kind == TokenKind::String || t.kind == TokenKind::Integer ||
           t.kind == TokenKind::Float || at_op("[") || at_op("{");
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (at_op("|")) {
        next();
        const Token& t = peek();
        std::string name = expect_name("a filter name");
        auto e = make(Expr::Kind::Filter, t.pos);
        e->name = std::move(name);
        e->a = std::move(node);
        if (at_op("(")) parse_args(*e);
        node = seal(std::move(e));
      } else if (at_name("is")) {
        next();
        auto e = make(Expr::Kind::Test, peek().pos);
        if (at_name("not")) {
          next();
          e->negate = true;
        }
        const Token& t = peek();
        if (t.kind != TokenKind::Name) unexpected(t, "a test name");
        e->pos = t.pos;
        e->name = next().text;
        e->a = std::move(node);
        if (at_op("(")) {
          parse_args(*e);
        } else if (at_test_argument()) {
          e->items.push_back(parse_postfix(parse_primary()));
        }
        node = seal(std::move(e));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Program parse(const std::string& source) { return Parser(lex(source)).run(); }

}  // namespace fp4lm::tokenizer::jinja
