#include "engine/structured/spec.h"

#include "engine/structured/gbnf.h"
#include "engine/structured/grammar_error.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/regex_syntax.h"

namespace fp4lm::engine::structured {

std::string StructuredSpec::key() const {
  std::string k(1, static_cast<char>('0' + static_cast<int>(kind)));
  k += text;
  if (kind == Kind::JsonSchema || kind == Kind::JsonObject)
    k += whitespace.compact ? "\x01c" : "\x01w" + std::to_string(whitespace.max_indent);
  for (const auto& c : choices) {
    k += '\0';
    k += c;
  }
  return k;
}

ExprGrammar to_grammar(const StructuredSpec& spec) {
  switch (spec.kind) {
    case StructuredSpec::Kind::None: throw GrammarError("no structured output requested");
    case StructuredSpec::Kind::JsonSchema: return compile_json_schema(spec.text, spec.whitespace);
    case StructuredSpec::Kind::JsonObject: return any_json_object(spec.whitespace);
    case StructuredSpec::Kind::Grammar: return parse_gbnf(spec.text);
    case StructuredSpec::Kind::Regex: {
      ExprGrammar g;
      g.define("root", parse_regex(spec.text));
      return g;
    }
    case StructuredSpec::Kind::Choice: {
      if (spec.choices.empty()) throw GrammarError("choice: the list of choices is empty");
      std::vector<Expr> alts;
      for (const auto& c : spec.choices) alts.push_back(Expr::bytes(c));
      ExprGrammar g;
      g.define("root", Expr::alt(std::move(alts)));
      return g;
    }
  }
  throw GrammarError("unknown structured output kind");
}

}  // namespace fp4lm::engine::structured
