#pragma once
// A bad value in a generation request or in engine parameters, naming the parameter as the
// library spells it (`max_tokens`, `max_model_len`). It is a UsageError: the CLI exits 2 (after
// adding its flag spelling), Python raises ValueError, the server answers 400 with `param`.
#include <string>
#include <utility>

#include "core/error.h"

namespace fp4lm::engine {

struct RequestError : UsageError {
  RequestError(const std::string& msg, std::string param_name = {})
      : UsageError(msg), param(std::move(param_name)) {}
  std::string param;
};

}  // namespace fp4lm::engine
