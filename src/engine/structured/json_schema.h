#pragma once
// JSON Schema -> grammar (what vLLM's xgrammar / llguidance backends take): type (one or a list),
// properties / required / additionalProperties (absent = false, as in OpenAI strict mode and
// xgrammar) / patternProperties / minProperties / maxProperties, items / prefixItems (draft 4:
// items as a list, additionalItems) / minItems / maxItems, enum, const, anyOf / oneOf (as
// anyOf), allOf of one schema, $ref into the document (#, #/$defs/..., recursion allowed),
// strings with minLength / maxLength, pattern or format (date, time, date-time, uuid, email,
// hostname, ipv4, ipv6, uri), integer / number with minimum / maximum / exclusiveMinimum /
// exclusiveMaximum (numeric_range.h), boolean, null. Properties come in the order the schema
// lists them. Any other keyword is a GrammarError naming it and where it is; annotations (title,
// description, default, examples, ...) are ignored. Whitespace between tokens as `whitespace`
// says (spec.h): bounded, so output stays finite.
#include <string>

#include "engine/structured/expr.h"
#include "engine/structured/spec.h"

namespace fp4lm::engine::structured {

ExprGrammar compile_json_schema(const std::string& schema_json, const JsonWhitespace& whitespace = {});
// Any JSON value whose top level is an object (OpenAI's json_object mode).
ExprGrammar any_json_object(const JsonWhitespace& whitespace = {});

}  // namespace fp4lm::engine::structured
