#pragma once
// GBNF grammars (llama.cpp's format, which xgrammar's EBNF also reads): `name ::= alternatives`,
// "double" or 'single' quoted literals with escapes, [character classes] with ^ and ranges, '.',
// rule references, ( groups ), | alternation, * + ? {m} {m,} {m,n}, # comments. The start rule is
// `root`. Errors name the line and column.
#include <string_view>

#include "engine/structured/expr.h"

namespace fp4lm::engine::structured {

ExprGrammar parse_gbnf(std::string_view text);

}  // namespace fp4lm::engine::structured
