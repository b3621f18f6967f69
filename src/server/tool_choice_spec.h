#pragma once
// tool_choice "required" / a named function as a structured-output constraint, the way vLLM
// enforces them: a named function's output is its arguments, a JSON value of the function's
// `parameters` schema; "required" is a JSON array of one or more {"name": <a tool's name>,
// "parameters": <that tool's arguments>} objects. "auto", "none" or no tool_choice: no constraint.
// Turning the constrained output into `tool_calls` in the response is the tool-call parser's job.
// Expects a body whose tools / tool_choice passed chat_schema's checks.
#include <nlohmann/json.hpp>

#include "engine/structured/spec.h"

namespace fp4lm::server {

// ApiError 400 when a named function is not among `tools`.
engine::structured::StructuredSpec tool_choice_spec(const nlohmann::json& body);

}  // namespace fp4lm::server
