#pragma once
// Cross-origin resource sharing as vLLM configures it (Starlette's CORSMiddleware behind
// --allowed-origins, --allowed-methods, --allowed-headers, --allow-credentials; every default
// "*", credentials off). Preflights are answered here, before authentication: a browser sends
// them without the Authorization header.
#include <optional>
#include <string>
#include <vector>

#include "server/http_message.h"

namespace fp4lm::server {

struct CorsOptions {
  std::vector<std::string> allowed_origins{"*"}, allowed_methods{"*"}, allowed_headers{"*"};
  bool allow_credentials = false;
};

class CorsPolicy {
 public:
  explicit CorsPolicy(CorsOptions o);
  // Whether the request is a preflight (OPTIONS with Origin and Access-Control-Request-Method).
  static bool is_preflight(const HttpRequest& head);
  // The preflight's answer: 200 with the Access-Control-Allow-* fields, or 400 naming what is not
  // allowed (origin, method or headers).
  HttpResponse preflight(const HttpRequest& head) const;
  // Fields added to an actual response when the request carries an allowed Origin.
  HeaderFields response_fields(const HttpRequest& req) const;

 private:
  bool origin_allowed(const std::string& origin) const;
  std::string allow_origin_value(const std::string& origin) const;
  CorsOptions o_;
  bool any_origin_, any_method_, any_header_;
};

// Parses a flag value: a JSON list (vLLM's form, e.g. '["http://a.com"]') or comma-separated
// words. Usage error naming `flag` on malformed input.
std::vector<std::string> parse_cors_list(const std::string& value, const std::string& flag);

}  // namespace fp4lm::server
