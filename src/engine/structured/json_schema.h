#pragma once
// JSON Schema -> grammar (the subset vLLM's xgrammar backend takes): type (one or a list),
// properties / required / additionalProperties (absent = false, as in OpenAI strict mode and
// xgrammar), items / minItems / maxItems, enum, const, anyOf / oneOf (as anyOf), allOf of one
// schema, $ref into the document (#, #/$defs/..., recursion allowed), strings with minLength /
// maxLength, pattern or format (date, time, date-time, uuid), integer / number (minimum >= 0
// drops the sign; other bounds are refused), boolean, null. Properties come in the order the
// schema lists them. Any other keyword is a GrammarError naming it and where it is; annotations
// (title, description, default, examples, ...) are ignored. Whitespace between tokens: none, one
// space, or a newline and up to 20 spaces/tabs of indentation (so output stays finite).
#include <string>

#include "engine/structured/expr.h"

namespace fp4lm::engine::structured {

ExprGrammar compile_json_schema(const std::string& schema_json);
// Any JSON value whose top level is an object (OpenAI's json_object mode).
ExprGrammar any_json_object();

}  // namespace fp4lm::engine::structured
