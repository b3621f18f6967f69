#pragma once
// An HTTP error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}, with vLLM's
// types (BadRequestError 400, AuthenticationError 401, NotFoundError 404, ...).
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace fp4lm::server {

struct ApiError : std::runtime_error {
  ApiError(int status_code, const std::string& message, std::string param_name = {})
      : std::runtime_error(message), status(status_code), param(std::move(param_name)) {}
  int status;
  std::string param;  // the request field at fault ("" = none)

  std::string type() const;
  nlohmann::json to_json() const;
};

inline ApiError bad_request(const std::string& message, const std::string& param = {}) {
  return ApiError(400, message, param);
}

}  // namespace fp4lm::server
