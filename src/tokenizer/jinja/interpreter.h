#pragma once
// Renders a parsed template against a context, with Jinja2 scoping: a for loop body and a macro
// body get their own scope (so `{% set %}` inside them does not leak out; use a namespace), if
// blocks do not. Every failure is a TemplateError with the line and column of the expression or
// statement that failed; raise_exception(msg) gives the message as written.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/ast.h"

namespace fp4lm::tokenizer::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;
  int64_t max_steps = 20'000'000;  // statements executed + loop iterations
  int max_call_depth = 64;         // nested macro calls
};

// Checks what can be checked before rendering: filter and test names exist, break/continue sit
// inside a loop. Throws TemplateError.
void validate(const Program& program);

std::string render(const Program& program, const std::vector<std::pair<std::string, Value>>& context,
                   const RenderLimits& limits = {});

}  // namespace fp4lm::tokenizer::jinja
