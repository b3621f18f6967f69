#pragma once
// Regular expressions (the ECMAScript / Python subset structured outputs use) -> Expr: literals,
// '.', classes [a-z] [^...] with \d \w \s, escapes (\n \t \xHH \uHHHH \u{...}), groups (...),
// (?:...), (?<name>...), alternation, quantifiers * + ? {m} {m,} {m,n} (lazy forms match the
// same language). The whole text must match (leading ^ / trailing $ are accepted). Lookaround,
// backreferences and word boundaries are GrammarErrors naming the construct and its position.
#include <string_view>

#include "engine/structured/expr.h"

namespace fp4lm::engine::structured {

// `inside_json_string`: the pattern constrains a JSON string value, so characters that JSON
// must escape are matched in their escaped form.
Expr parse_regex(std::string_view pattern, bool inside_json_string = false);

}  // namespace fp4lm::engine::structured
