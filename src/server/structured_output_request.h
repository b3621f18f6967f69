#pragma once
// The structured-output fields of an OpenAI / vLLM request -> one engine spec: OpenAI's
// response_format ({"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
// "schema", "strict"}}), vLLM's structured_outputs ({"json" | "regex" | "choice" | "grammar" |
// "json_object"}) and its older guided_json / guided_regex / guided_choice / guided_grammar. At
// most one constraint per request; a malformed one is an ApiError 400 naming the field. Whether
// the schema / regex / grammar itself compiles is checked when the engine admits the request
// (engine::RequestError naming the same field).
#include <nlohmann/json.hpp>

#include "engine/structured/spec.h"

namespace fp4lm::server {

engine::structured::StructuredSpec parse_structured_outputs(const nlohmann::json& body);

// The whitespace JSON constraints allow: the server's default (--structured-outputs-config.
// disable_any_whitespace, --structured-outputs-max-whitespace) unless the request's
// structured_outputs.disable_any_whitespace says otherwise. structured_outputs.whitespace_pattern
// is a 400 (no arbitrary whitespace regexes); disable_additional_properties is accepted (an absent
// additionalProperties already means false).
engine::structured::JsonWhitespace json_whitespace(const nlohmann::json& body,
                                                   const engine::structured::JsonWhitespace& server_default);

}  // namespace fp4lm::server
