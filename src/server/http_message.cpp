#include "server/http_message.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace fp4lm::server {

namespace {

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// tchar (RFC 9110 §5.6.2).
bool is_tchar(unsigned char c) {
  return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

// field-value characters: VCHAR, obs-text, SP, HTAB (RFC 9110 §5.5).
bool is_field_vchar(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

// uri-host [":" port] (RFC 9110 §7.2, RFC 3986 §3.2.2): reg-name / IPv4 / "[" IP-literal "]".
bool valid_host(std::string_view h) {
  if (h.empty()) return false;
  std::string_view port;
  if (h.front() == '[') {
    const size_t close = h.find(']');
    if (close == std::string_view::npos) return false;
    for (char c : h.substr(1, close - 1))
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return false;
    std::string_view rest = h.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port = rest.substr(1);
    }
  } else {
    const size_t colon = h.rfind(':');
    std::string_view name = h;
    if (colon != std::string_view::npos) {
      name = h.substr(0, colon);
      port = h.substr(colon + 1);
    }
    for (char c : name) {
      const auto u = static_cast<unsigned char>(c);
      if (!std::isalnum(u) && std::string_view("-._~!$&'()*+,;=%").find(c) == std::string_view::npos) return false;
    }
    if (colon != std::string_view::npos && port.empty()) return true;  // "host:" is allowed (empty port)
  }
  if (port.size() > 5) return false;
  return std::all_of(port.begin(), port.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

std::optional<HeadRejection> check_fields(const HttpRequest& h, const HeadLimits& limits) {
  for (const auto& [name, value] : h.headers) {
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); }))
      return HeadRejection{400, "invalid header field name"};
    if (!std::all_of(value.begin(), value.end(), [](char c) { return is_field_vchar(static_cast<unsigned char>(c)); }))
      return HeadRejection{400, fmt::format("invalid character in header field '{}'", log_escape(name))};
    if (name.size() + 2 + value.size() > limits.max_line_bytes)
      return HeadRejection{431, fmt::format("header field '{}' is longer than {} bytes", log_escape(name, 64),
                                            limits.max_line_bytes)};
  }
  return std::nullopt;
}

// Message framing (RFC 9112 §6.1, §6.3): the only transfer coding understood is a lone
// "chunked", and a message with both framings is a smuggling attempt.
std::optional<HeadRejection> check_framing(const HttpRequest& h) {
  const size_t te = h.count("Transfer-Encoding"), cl = h.count("Content-Length");
  if (te > 0 && cl > 0) return HeadRejection{400, "both Transfer-Encoding and Content-Length"};
  if (te > 1) return HeadRejection{400, "more than one Transfer-Encoding field"};
  if (te == 1) {
    if (h.version == 10) return HeadRejection{400, "Transfer-Encoding in an HTTP/1.0 request"};
    if (!iequal(trim(*h.header("Transfer-Encoding")), "chunked"))
      return HeadRejection{501, "unsupported Transfer-Encoding (only 'chunked')"};
  }
  if (cl > 1) {
    const std::string& first = *h.header("Content-Length");
    for (const auto& [name, value] : h.headers)
      if (iequal(name, "Content-Length") && trim(value) != trim(first))
        return HeadRejection{400, "conflicting Content-Length fields"};
  }
  if (const std::string* ce = h.header("Content-Encoding"); ce && !iequal(trim(*ce), "identity"))
    return HeadRejection{415, "request bodies must not be compressed (Content-Encoding: identity only)"};
  return std::nullopt;
}

}  // namespace

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequal(k, name)) return &v;
  return nullptr;
}

size_t HttpRequest::count(std::string_view name) const {
  return static_cast<size_t>(
      std::count_if(headers.begin(), headers.end(), [&](const auto& kv) { return iequal(kv.first, name); }));
}

std::string target_path(std::string_view target) {
  if (target == "*") return "*";
  if (!target.empty() && target.front() != '/') {  // absolute-form: scheme://authority/path
    const size_t scheme_end = target.find("://");
    if (scheme_end == std::string_view::npos) return {};
    const size_t slash = target.find('/', scheme_end + 3);
    target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  }
  const size_t q = target.find_first_of("?#");
  return std::string(q == std::string_view::npos ? target : target.substr(0, q));
}

std::optional<HeadRejection> check_request_head(const HttpRequest& h, const HeadLimits& limits) {
  if (h.version != 10 && h.version != 11) return HeadRejection{505, "only HTTP/1.0 and HTTP/1.1 are served"};
  if (h.target.size() > limits.max_line_bytes)
    return HeadRejection{414, fmt::format("request target longer than {} bytes", limits.max_line_bytes)};
  if (h.path.empty() || (h.path == "*" && h.method != "OPTIONS"))
    return HeadRejection{400, "invalid request target"};
  for (char c : h.target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return HeadRejection{400, "invalid request target"};
  if (auto r = check_fields(h, limits)) return r;
  const size_t hosts = h.count("Host");
  if (hosts > 1) return HeadRejection{400, "more than one Host field"};
  if (hosts == 0 && h.version == 11) return HeadRejection{400, "HTTP/1.1 requests need a Host field"};
  if (hosts == 1 && !valid_host(trim(*h.header("Host")))) return HeadRejection{400, "invalid Host field"};
  return check_framing(h);
}

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

namespace {

std::string head_lines(const HttpResponse& r) {
  std::string s = fmt::format("HTTP/1.1 {} {}\r\n", r.status, reason_phrase(r.status));
  if (!r.content_type.empty()) s += fmt::format("Content-Type: {}\r\n", r.content_type);
  for (const auto& [k, v] : r.headers) s += fmt::format("{}: {}\r\n", k, v);
  return s;
}

}  // namespace

std::string serialize_response(const HttpResponse& r, bool keep_alive, bool head_only) {
  std::string s = head_lines(r);
  s += fmt::format("Content-Length: {}\r\n", r.body.size());
  s += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  if (!head_only) s += r.body;
  return s;
}

std::string serialize_stream_head(const HttpResponse& r, bool chunked) {
  std::string s = head_lines(r);
  s += chunked ? "Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return s;
}

std::string chunk(std::string_view data) {
  if (data.empty()) return {};
  return fmt::format("{:x}\r\n{}\r\n", data.size(), data);
}

std::string last_chunk() { return "0\r\n\r\n"; }

std::string log_escape(std::string_view s, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == max_bytes) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

}  // namespace fp4lm::server
