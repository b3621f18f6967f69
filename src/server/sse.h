#pragma once
// Server-sent events framing as OpenAI streams use it: one `data: <json>` event per chunk, a
// blank line after each, `data: [DONE]` last. Comment lines (": ...") keep an idle stream alive
// and reveal a client that has gone away.
#include <string>

#include <nlohmann/json.hpp>

namespace fp4lm::server {

std::string sse_event(const nlohmann::json& payload);
std::string sse_done();
std::string sse_comment(const std::string& text);

}  // namespace fp4lm::server
