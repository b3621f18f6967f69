#include "server/cors.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fp4lm::server {

namespace {

constexpr const char* kAllMethods = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT";

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

CorsPolicy::CorsPolicy(CorsOptions o)
    : o_(std::move(o)),
      any_origin_(contains(o_.allowed_origins, "*")),
      any_method_(contains(o_.allowed_methods, "*")),
      any_header_(contains(o_.allowed_headers, "*")) {
  for (auto& h : o_.allowed_headers) h = lower(h);
}

bool CorsPolicy::is_preflight(const HttpRequest& head) {
  return head.method == "OPTIONS" && head.header("Origin") && head.header("Access-Control-Request-Method");
}

bool CorsPolicy::origin_allowed(const std::string& origin) const {
  return any_origin_ || contains(o_.allowed_origins, origin);
}

// "*" only when any origin is allowed without credentials; otherwise the origin itself (a
// browser refuses "*" on a credentialed request).
std::string CorsPolicy::allow_origin_value(const std::string& origin) const {
  return any_origin_ && !o_.allow_credentials ? "*" : origin;
}

HttpResponse CorsPolicy::preflight(const HttpRequest& head) const {
  const std::string& origin = *head.header("Origin");
  const std::string& method = *head.header("Access-Control-Request-Method");
  const std::string* req_headers = head.header("Access-Control-Request-Headers");
  std::vector<std::string> failures;
  if (!origin_allowed(origin)) failures.push_back("origin");
  if (!any_method_ && !contains(o_.allowed_methods, method)) failures.push_back("method");
  if (req_headers && !any_header_)
    for (const auto& h : split_commas(*req_headers))
      if (!contains(o_.allowed_headers, lower(h))) {
        failures.push_back("headers");
        break;
      }
  HttpResponse r;
  r.content_type = "text/plain; charset=utf-8";
  r.headers.emplace_back("Vary", "Origin");
  if (!failures.empty()) {
    r.status = 400;
    r.body = "Disallowed CORS " + join(failures);
    return r;
  }
  r.status = 200;
  r.body = "OK";
  r.headers.emplace_back("Access-Control-Allow-Origin", allow_origin_value(origin));
  r.headers.emplace_back("Access-Control-Allow-Methods", any_method_ ? kAllMethods : join(o_.allowed_methods));
  if (any_header_ && req_headers) r.headers.emplace_back("Access-Control-Allow-Headers", *req_headers);
  else if (!any_header_) r.headers.emplace_back("Access-Control-Allow-Headers", join(o_.allowed_headers));
  if (o_.allow_credentials) r.headers.emplace_back("Access-Control-Allow-Credentials", "true");
  r.headers.emplace_back("Access-Control-Max-Age", "600");
  return r;
}

HeaderFields CorsPolicy::response_fields(const HttpRequest& req) const {
  HeaderFields f;
  const std::string* origin = req.header("Origin");
  if (!origin || !origin_allowed(*origin)) return f;
  f.emplace_back("Access-Control-Allow-Origin", allow_origin_value(*origin));
  if (o_.allow_credentials) f.emplace_back("Access-Control-Allow-Credentials", "true");
  if (allow_origin_value(*origin) != "*") f.emplace_back("Vary", "Origin");
  return f;
}

std::vector<std::string> parse_cors_list(const std::string& value, const std::string& flag) {
  if (!value.empty() && value.front() == '[') {
    const auto j = nlohmann::json::parse(value, nullptr, false);
    if (j.is_discarded() || !j.is_array()) usage_fail("{}: '{}' is not a JSON list of strings", flag, value);
    std::vector<std::string> out;
    for (const auto& x : j) {
      if (!x.is_string()) usage_fail("{}: '{}' is not a JSON list of strings", flag, value);
      out.push_back(x.get<std::string>());
    }
    return out;
  }
  auto out = split_commas(value);
  if (out.empty()) usage_fail("{}: empty list", flag);
  return out;
}

}  // namespace fp4lm::server
