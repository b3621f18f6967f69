#pragma once
// What a request asks its output to match, as the API layer parsed it (OpenAI response_format,
// vLLM structured_outputs / guided_*). `param` names the request field it came from, for errors.
#include <string>
#include <vector>

#include "engine/structured/expr.h"

namespace fp4lm::engine::structured {

struct StructuredSpec {
  enum class Kind { None, JsonSchema, JsonObject, Regex, Choice, Grammar };
  Kind kind = Kind::None;
  std::string text;                  // the schema (JSON text), regex or grammar
  std::vector<std::string> choices;  // Choice
  std::string param;                 // e.g. "response_format", "structured_outputs.regex"

  bool active() const { return kind != Kind::None; }
  // A key that identifies the spec (the compile cache's).
  std::string key() const;
};

// The spec as a grammar; GrammarError names the problem.
ExprGrammar to_grammar(const StructuredSpec& spec);

}  // namespace fp4lm::engine::structured
