#pragma once
// The syntax tree of a parsed Jinja template: expressions and statements.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace fp4lm::tokenizer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,    // value
    Name,       // name
    List,       // [items...]; name "tuple" for (a, b)
    Dict,       // {keys[i]: items[i]}
    Attr,       // a.name
    Item,       // a[b]
    Slice,      // a[b:c:d] (b, c, d may be null)
    Call,       // a(items..., kwargs...)
    Filter,     // a | name(items..., kwargs...)
    Test,       // a is [not] name(items...)       negate = "is not"
    Unary,      // op a         op: "-", "+", "not"
    Binary,     // a op b       op: + - * / // % ** ~ == != < <= > >= in "not in"
    And,        // a and b
    Or,         // a or b
    Cond,       // a if b else c (c may be null)
  };
  Kind kind;
  Pos pos;
  int height = 1;    // longest path to a leaf; bounded by the parser (kMaxParseDepth)
  Value value;       // Literal
  std::string name;  // Name, Attr, Filter, Test; operator for Unary/Binary
  bool negate = false;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;                          // List, Dict values, call arguments
  std::vector<ExprPtr> keys;                           // Dict keys
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // Call, Filter
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches: conds[i] -> bodies[i]; else_body
    For,       // for targets in expr [if cond]: body [else else_body]
    Set,       // set target = expr (attr non-empty: set target.attr = expr)
    SetBlock,  // set target %}body{% endset
    Break,
    Continue,
    Macro,     // macro target(params = defaults) body
    Scope,     // a block that only renders its body ({% generation %})
  };
  Kind kind;
  Pos pos;
  std::string text;                  // Text
  ExprPtr expr;                      // Output, For iterable, Set value
  ExprPtr cond;                      // For filter
  std::vector<ExprPtr> conds;        // If
  std::vector<Body> bodies;          // If
  Body body;                         // For, SetBlock, Macro, Scope
  Body else_body;                    // If, For
  std::vector<std::string> targets;  // For (one or more), Set/SetBlock/Macro (one; Set may unpack)
  std::string attr;                  // Set ns.attr
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro (default may be null)
};

struct Program {
  Body body;
};

}  // namespace fp4lm::tokenizer::jinja
