#pragma once
// Characters inside a JSON string literal: the code points a value may contain, as they appear in
// JSON text ('"', '\' and control characters only as escapes).
#include <utility>
#include <vector>

#include "engine/structured/expr.h"

namespace fp4lm::engine::structured {

// One character of any JSON string: a plain character or any escape sequence.
Expr json_string_char();
// One character out of `ranges` (normalized), written as JSON requires: characters that must be
// escaped are matched as their short escape (\" \\ \n ...) or \u00XX.
Expr json_chars_in(const std::vector<std::pair<char32_t, char32_t>>& ranges);

}  // namespace fp4lm::engine::structured
