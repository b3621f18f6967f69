#include "server/unsupported_fields.h"

#include <string_view>

#include <fmt/format.h>

#include "server/api_error.h"

namespace fp4lm::server {

using nlohmann::json;

namespace {

// A field and the values that leave the output as fp4lm produces it (null always does).
struct Unsupported {
  std::string_view name;
  json no_op;  // the default; any other value is refused
  std::string_view why;
  bool chat = true, completions = true;
};

const std::vector<Unsupported>& table() {
  static const std::vector<Unsupported> t = {
      {"include_stop_str_in_output", false, "stop strings are never part of the output"},
      {"spaces_between_special_tokens", true, "special tokens are always decoded without added spaces"},
      {"bad_words", json::array(), "bad_words is not supported"},
      {"watermarking", false, "watermarking is not supported"},
      {"thinking_token_budget", nullptr, "thinking_token_budget is not supported"},
      {"repetition_detection", nullptr, "repetition_detection is not supported"},
      {"priority", 0, "priority scheduling is not supported (requests run first come, first served)"},
      {"chat_template", nullptr,
       "a chat template in the request is not accepted (vLLM refuses it without --trust-request-chat-template)", true,
       false},
      {"prompt_embeds", nullptr, "prompt_embeds is not supported", false, true},
      {"suffix", nullptr, "'suffix' is not supported", false, true},
  };
  return t;
}

}  // namespace

void reject_unsupported_fields(const json& b, Endpoint endpoint) {
  for (const Unsupported& u : table()) {
    if (endpoint == Endpoint::chat ? !u.chat : !u.completions) continue;
    const std::string key(u.name);
    if (!b.contains(key) || b[key].is_null()) continue;
    const json& v = b[key];
    const bool same = v == u.no_op || (v.is_number() && u.no_op.is_number() && v.get<double>() == u.no_op.get<double>());
    if (!same) throw bad_request(fmt::format("'{}': {}", key, u.why), key);
  }
}

}  // namespace fp4lm::server
