#pragma once
// What a request asks its output to match, as the API layer parsed it (OpenAI response_format,
// vLLM structured_outputs / guided_*). `param` names the request field it came from, for errors.
#include <string>
#include <utility>
#include <vector>

#include "engine/structured/expr.h"

namespace fp4lm::engine::structured {

// Whitespace between JSON tokens in constrained JSON (schemas, json_object, tool calls).
struct JsonWhitespace {
  // vLLM's disable_any_whitespace: no free whitespace; items separated by ", " and keys by ": "
  // (xgrammar's separators without indentation).
  bool compact = false;
  // Otherwise a gap is nothing, one space, or a newline and at most this many spaces/tabs, so a
  // model cannot spend its tokens on blanks.
  int max_indent = 20;
};

struct StructuredSpec {
  enum class Kind { None, JsonSchema, JsonObject, Regex, Choice, Grammar };
  StructuredSpec() = default;
  StructuredSpec(Kind k, std::string t, std::vector<std::string> c, std::string p, JsonWhitespace w = {})
      : kind(k), text(std::move(t)), choices(std::move(c)), param(std::move(p)), whitespace(w) {}
  Kind kind = Kind::None;
  std::string text;                  // the schema (JSON text), regex or grammar
  std::vector<std::string> choices;  // Choice
  std::string param;                 // e.g. "response_format", "structured_outputs.regex"
  JsonWhitespace whitespace;         // JsonSchema / JsonObject

  bool active() const { return kind != Kind::None; }
  // A key that identifies the spec (the compile cache's).
  std::string key() const;
};

// The spec as a grammar; GrammarError names the problem.
ExprGrammar to_grammar(const StructuredSpec& spec);

}  // namespace fp4lm::engine::structured
