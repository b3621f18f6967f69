#include "tokenizer/jinja/interpreter.h"

#include "tokenizer/jinja/builtins.h"

namespace fp4lm::tokenizer::jinja {
namespace {

// One scope: the globals, the render context (which also takes top-level sets), a loop
// iteration, a macro call.
struct Frame {
  Frame* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent)
      for (const auto& kv : f->vars)
        if (kv.first == name) return &kv.second;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& kv : vars)
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  Renderer(const RenderLimits& limits, Frame* root) : limits_(limits), root_(root) {}

  Flow exec_body(const Body& body, Frame& f, std::string& out) {
    for (const auto& s : body) {
      Flow flow = exec(*s, f, out);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

 private:
  void step(Pos pos) {
    if (++steps_ > limits_.max_steps)
      throw TemplateError(pos, fmt::format("template ran more than {} steps", limits_.max_steps));
  }

  void emit(std::string& out, const std::string& s, Pos pos) {
    if (out.size() + s.size() > limits_.max_output_bytes)
      throw TemplateError(pos, fmt::format("output larger than {} bytes", limits_.max_output_bytes));
    out += s;
  }

  Flow exec(const Stmt& s, Frame& f, std::string& out) {
    step(s.pos);
    switch (s.kind) {
      case Stmt::Kind::Text:
        emit(out, s.text, s.pos);
        return Flow::Normal;
      case Stmt::Kind::Output: {
        const Value v = eval(*s.expr, f);
        std::string text;
        try {
          text = v.str();  // printing a list or dict is bounded as it goes
        } catch (const ValueError& e) {
          throw TemplateError(s.expr->pos, e.what());
        }
        emit(out, text, s.pos);
        return Flow::Normal;
      }
      case Stmt::Kind::If:
        for (size_t i = 0; i < s.conds.size(); ++i)
          if (eval(*s.conds[i], f).truthy()) return exec_body(s.bodies[i], f, out);
        return exec_body(s.else_body, f, out);
      case Stmt::Kind::For:
        return exec_for(s, f, out);
      case Stmt::Kind::Set:
        exec_set(s, eval(*s.expr, f), f);
        return Flow::Normal;
      case Stmt::Kind::SetBlock: {
        std::string captured;
        Flow flow = exec_body(s.body, f, captured);
        f.set(s.targets[0], Value(std::move(captured)));
        return flow;
      }
      case Stmt::Kind::Break:
        return Flow::Break;
      case Stmt::Kind::Continue:
        return Flow::Continue;
      case Stmt::Kind::Macro:
        f.set(s.targets[0], Value::function([this, &s](const CallArgs& a) { return call_macro(s, a); }));
        return Flow::Normal;
      case Stmt::Kind::Scope:
        return exec_body(s.body, f, out);
    }
    return Flow::Normal;
  }

  void bind(const std::vector<std::string>& targets, const Value& v, Frame& f, Pos pos) {
    if (targets.size() == 1) {
      f.set(targets[0], v);
      return;
    }
    std::vector<Value> parts;
    try {
      parts = iterate(v);
    } catch (const ValueError& e) {
      throw TemplateError(pos, fmt::format("cannot unpack {} into {} names", v.type_name(), targets.size()));
    }
    if (parts.size() != targets.size())
      throw TemplateError(pos, fmt::format("cannot unpack {} values into {} names", parts.size(), targets.size()));
    for (size_t i = 0; i < targets.size(); ++i) f.set(targets[i], parts[i]);
  }

  void exec_set(const Stmt& s, const Value& v, Frame& f) {
    if (s.attr.empty()) {
      bind(s.targets, v, f, s.pos);
      return;
    }
    const Value* ns = f.find(s.targets[0]);
    if (!ns || !ns->is_namespace())
      throw TemplateError(s.pos, fmt::format("cannot assign attribute '{}' on '{}': not a namespace",
                                             s.attr, s.targets[0]));
    try {
      ns->as_namespace().set(s.attr, v);
    } catch (const ValueError& e) {
      throw TemplateError(s.pos, e.what());
    }
  }

  Value loop_object(size_t i, const std::vector<Value>& items) {
    auto n = static_cast<int64_t>(items.size());
    auto k = static_cast<int64_t>(i);
    std::vector<std::pair<std::string, Value>> d;
    d.reserve(12);
    d.emplace_back("index0", Value(k));
    d.emplace_back("index", Value(k + 1));
    d.emplace_back("revindex0", Value(n - k - 1));
    d.emplace_back("revindex", Value(n - k));
    d.emplace_back("first", Value(k == 0));
    d.emplace_back("last", Value(k == n - 1));
    d.emplace_back("length", Value(n));
    d.emplace_back("depth", Value(1));
    d.emplace_back("depth0", Value(0));
    d.emplace_back("previtem", i > 0 ? items[i - 1] : Value(Undefined{"previtem"}));
    d.emplace_back("nextitem", i + 1 < items.size() ? items[i + 1] : Value(Undefined{"nextitem"}));
    d.emplace_back("cycle", Value::function([i](const CallArgs& a) {
      if (a.positional.empty()) value_fail("loop.cycle needs at least one argument");
      return a.positional[i % a.positional.size()];
    }));
    return Value::dict(std::move(d));
  }

  Flow exec_for(const Stmt& s, Frame& f, std::string& out) {
    Value seq = eval(*s.expr, f);
    std::vector<Value> items;
    try {
      items = iterate(seq);
    } catch (const ValueError& e) {
      throw TemplateError(s.expr->pos, e.what());
    }
    if (s.cond) {  // `for x in xs if cond`: filter first, so loop.length counts what is kept
      std::vector<Value> kept;
      for (auto& item : items) {
        step(s.pos);
        Frame tmp{&f, {}};
        bind(s.targets, item, tmp, s.pos);
        if (eval(*s.cond, tmp).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(s.else_body, f, out);
    for (size_t i = 0; i < items.size(); ++i) {
      step(s.pos);
      Frame lf{&f, {}};
      bind(s.targets, items[i], lf, s.pos);
      lf.set("loop", loop_object(i, items));
      if (exec_body(s.body, lf, out) == Flow::Break) break;
    }
    return Flow::Normal;
  }

  Value call_macro(const Stmt& s, const CallArgs& a) {
    struct DepthGuard {
      int& d;
      ~DepthGuard() { --d; }
    } guard{++call_depth_};
    if (call_depth_ > limits_.max_call_depth)
      value_fail("macro calls nested deeper than {}", limits_.max_call_depth);
    if (a.positional.size() > s.params.size())
      value_fail("macro '{}' takes {} arguments, {} given", s.targets[0], s.params.size(), a.positional.size());
    for (const auto& kv : a.keyword) {
      bool known = false;
      for (const auto& p : s.params) known = known || p.first == kv.first;
      if (!known) value_fail("macro '{}' has no parameter '{}'", s.targets[0], kv.first);
    }
    Frame mf{root_, {}};
    for (size_t i = 0; i < s.params.size(); ++i) {
      const auto& [name, def] = s.params[i];
      if (i < a.positional.size()) mf.set(name, a.positional[i]);
      else if (const Value* v = a.keyword_arg(name)) mf.set(name, *v);
      else if (def) mf.set(name, eval(*def, mf));
      else mf.set(name, Value(Undefined{name}));
    }
    std::string out;
    exec_body(s.body, mf, out);
    return Value(std::move(out));
  }

  CallArgs eval_args(const Expr& e, Frame& f) {
    CallArgs args;
    for (const auto& x : e.items) args.positional.push_back(eval(*x, f));
    for (const auto& [k, x] : e.kwargs) args.keyword.emplace_back(k, eval(*x, f));
    return args;
  }

  Value eval(const Expr& e, Frame& f) {
    try {
      return eval_impl(e, f);
    } catch (const ValueError& err) {
      throw TemplateError(e.pos, err.what());
    }
  }

  Value eval_impl(const Expr& e, Frame& f) {
    switch (e.kind) {
      case Expr::Kind::Literal:
        return e.value;
      case Expr::Kind::Name: {
        const Value* v = f.find(e.name);
        return v ? *v : Value(Undefined{e.name});
      }
      case Expr::Kind::List: {
        std::vector<Value> items;
        items.reserve(e.items.size());
        for (const auto& x : e.items) items.push_back(eval(*x, f));
        return e.name == "tuple" ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      case Expr::Kind::Dict: {
        std::vector<std::pair<std::string, Value>> items;
        for (size_t i = 0; i < e.keys.size(); ++i) {
          Value k = eval(*e.keys[i], f);
          if (!k.is_string()) value_fail("dict keys must be strings, found {}", k.type_name());
          Value v = eval(*e.items[i], f);
          bool replaced = false;
          for (auto& kv : items)
            if (kv.first == k.as_string()) {
              kv.second = v;
              replaced = true;
            }
          if (!replaced) items.emplace_back(k.as_string(), std::move(v));
        }
        return Value::dict(std::move(items));
      }
      case Expr::Kind::Attr:
        return get_attr(eval(*e.a, f), e.name);
      case Expr::Kind::Item:
        return get_item(eval(*e.a, f), eval(*e.b, f));
      case Expr::Kind::Slice: {
        Value obj = eval(*e.a, f);
        Value start = e.b ? eval(*e.b, f) : Value();
        Value stop = e.c ? eval(*e.c, f) : Value();
        Value step = e.items[0] ? eval(*e.items[0], f) : Value();
        return slice(obj, start, stop, step);
      }
      case Expr::Kind::Call: {
        Value callee = eval(*e.a, f);
        CallArgs args = eval_args(e, f);
        if (callee.is_undefined()) {
          if (callee.undefined_name().empty()) value_fail("call of an undefined value");
          value_fail("'{}' is undefined", callee.undefined_name());
        }
        if (!callee.is_callable()) value_fail("'{}' object is not callable", callee.type_name());
        return callee.as_function()(args);
      }
      case Expr::Kind::Filter: {
        Value v = eval(*e.a, f);
        return apply_filter(e.name, v, eval_args(e, f));
      }
      case Expr::Kind::Test: {
        Value v = eval(*e.a, f);
        return Value(apply_test(e.name, v, eval_args(e, f)) != e.negate);
      }
      case Expr::Kind::Unary:
        return unary_op(e.name, eval(*e.a, f));
      case Expr::Kind::Binary: {
        Value a = eval(*e.a, f);
        return binary_op(e.name, a, eval(*e.b, f));
      }
      case Expr::Kind::And: {
        Value a = eval(*e.a, f);
        return a.truthy() ? eval(*e.b, f) : a;
      }
      case Expr::Kind::Or: {
        Value a = eval(*e.a, f);
        return a.truthy() ? a : eval(*e.b, f);
      }
      case Expr::Kind::Cond:
        if (eval(*e.b, f).truthy()) return eval(*e.a, f);
        return e.c ? eval(*e.c, f) : Value(Undefined{});
    }
    return Value();
  }

  const RenderLimits& limits_;
  Frame* root_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

void validate_expr(const Expr& e) {
  if (e.kind == Expr::Kind::Filter && !has_filter(e.name))
    throw TemplateError(e.pos, fmt::format("unknown filter '{}'", e.name));
  if (e.kind == Expr::Kind::Test && !has_test(e.name))
    throw TemplateError(e.pos, fmt::format("unknown test '{}'", e.name));
  for (const Expr* c : {e.a.get(), e.b.get(), e.c.get()})
    if (c) validate_expr(*c);
  for (const auto& c : e.items)
    if (c) validate_expr(*c);
  for (const auto& c : e.keys) validate_expr(*c);
  for (const auto& kv : e.kwargs) validate_expr(*kv.second);
}

void validate_body(const Body& body, bool in_loop) {
  for (const auto& s : body) {
    if ((s->kind == Stmt::Kind::Break || s->kind == Stmt::Kind::Continue) && !in_loop)
      throw TemplateError(s->pos, s->kind == Stmt::Kind::Break ? "'break' outside a loop" : "'continue' outside a loop");
    for (const Expr* e : {s->expr.get(), s->cond.get()})
      if (e) validate_expr(*e);
    for (const auto& e : s->conds) validate_expr(*e);
    for (const auto& p : s->params)
      if (p.second) validate_expr(*p.second);
    bool loop_body = s->kind == Stmt::Kind::For || (in_loop && s->kind != Stmt::Kind::Macro);
    validate_body(s->body, loop_body);
    for (const auto& b : s->bodies) validate_body(b, in_loop);
    validate_body(s->else_body, in_loop);
  }
}

}  // namespace

void validate(const Program& program) { validate_body(program.body, false); }

std::string render(const Program& program, const std::vector<std::pair<std::string, Value>>& context,
                   const RenderLimits& limits) {
  Frame globals;
  for (auto& [k, v] : global_functions()) globals.set(k, std::move(v));
  Frame ctx{&globals, {}};
  for (const auto& [k, v] : context) ctx.set(k, v);
  Renderer r(limits, &ctx);
  std::string out;
  r.exec_body(program.body, ctx, out);
  return out;
}

}  // namespace fp4lm::tokenizer::jinja
