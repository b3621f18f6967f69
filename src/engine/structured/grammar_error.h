#pragma once
// A structured-output spec (JSON schema, regex, choice list, GBNF grammar) that cannot be
// compiled. The message names the offending keyword, rule or position; the API layer turns it
// into an HTTP 400.
#include <stdexcept>
#include <string>

namespace fp4lm::engine::structured {

struct GrammarError : std::runtime_error {
  explicit GrammarError(const std::string& msg) : std::runtime_error(msg) {}
};

}  // namespace fp4lm::engine::structured
