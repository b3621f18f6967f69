#pragma once
// The chat request's structured fields checked the way vLLM's schema checks them, before any of
// it reaches the template: messages (roles, content parts, tool calls), tools, tool_choice and
// chat_template_kwargs. Every violation is a 400 naming the field (`messages[2].content[0].type`).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace fp4lm::server {

// An image content part: its URL and the field that gave it (`messages[0].content[1].image_url.url`).
struct ImagePart {
  std::string url;
  std::string field;
};

// The messages as the template sees them: each content flattened to a string (text parts joined
// with newlines), or, when it holds images, a list of {"type": "text", "text"} and
// {"type": "image"} parts (vLLM's and transformers' form); assistant tool calls' `arguments`
// JSON strings parsed into objects (as vLLM hands them to templates, which `tojson` them), other
// fields kept. The image parts' URLs go to `images`, in order; with `images` null an image part
// is a 400.
nlohmann::json checked_messages(const nlohmann::json& body, std::vector<ImagePart>* images = nullptr);
// The same messages with the key order of the request body (Hugging Face's `tojson` keeps the
// order it was given): `checked` from checked_messages, `raw` the body's messages as parsed in
// order.
nlohmann::ordered_json ordered_messages(const nlohmann::json& checked, const nlohmann::ordered_json& raw);

// tools, tool_choice, add_generation_prompt and chat_template_kwargs as template options. A
// kwarg may not replace a variable the server sets (messages, tools, add_generation_prompt, ...).
tokenizer::ChatOptions checked_template_options(const nlohmann::json& body);

}  // namespace fp4lm::server
