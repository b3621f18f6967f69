#pragma once
// Parses a Jinja template into a syntax tree. Supported statements: if/elif/else, for (with
// tuple targets, an `if` filter and an else branch), set (expression, namespace attribute,
// block form), macro, break/continue, raw, and HF's `generation` block. Anything else is a
// TemplateError naming the line and column.
#include <string>

#include "tokenizer/jinja/ast.h"

namespace fp4lm::tokenizer::jinja {

// Blocks and expressions nested deeper than this are refused (keeps recursion bounded).
inline constexpr int kMaxParseDepth = 200;

Program parse(const std::string& source);

}  // namespace fp4lm::tokenizer::jinja
