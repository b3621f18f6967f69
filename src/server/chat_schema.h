#pragma once
// The chat request's structured fields checked the way vLLM's schema checks them, before any of
// it reaches the template: messages (roles, content parts, tool calls), tools, tool_choice and
// chat_template_kwargs. Every violation is a 400 naming the field (`messages[2].content[0].type`).
#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace fp4lm::server {

// The messages as the template sees them: each content flattened to a string (text parts joined
// with newlines), other fields kept.
nlohmann::json checked_messages(const nlohmann::json& body);

// tools, tool_choice, add_generation_prompt and chat_template_kwargs as template options. A
// kwarg may not replace a variable the server sets (messages, tools, add_generation_prompt, ...).
tokenizer::ChatOptions checked_template_options(const nlohmann::json& body);

}  // namespace fp4lm::server
