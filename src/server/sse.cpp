#include "server/sse.h"

namespace fp4lm::server {

std::string sse_event(const nlohmann::json& payload) {
  // One line: JSON dumps escape newlines inside strings, so the event cannot be split.
  return "data: " + payload.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

std::string sse_done() { return "data: [DONE]\n\n"; }

std::string sse_comment(const std::string& text) { return ": " + text + "\n\n"; }

}  // namespace fp4lm::server
