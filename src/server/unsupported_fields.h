#pragma once
// vLLM request fields fp4lm does not implement, walked field by field (docs/SERVER.md lists
// every field of vLLM's ChatCompletionRequest and CompletionRequest): a field that would change
// the output is a 400 naming it when set to anything but its no-op default; a field with no
// effect on the output here (tracing ids, disaggregation parameters, multimodal kwargs) is
// accepted and ignored, as vLLM ignores `user`.
#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace fp4lm::server {

// ApiError 400 naming the first field set to a value that is not supported.
void reject_unsupported_fields(const nlohmann::json& body, Endpoint endpoint);

}  // namespace fp4lm::server
