#pragma once
// HTTP/1.1 messages as the server sees them (RFC 9112), independent of the I/O library: the
// request a parser produced, the checks a request head must pass before its body is read, and
// response serialization (whole, chunked, or close-delimited for HTTP/1.0 clients).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fp4lm::server {

using HeaderFields = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method, target;  // as sent
  std::string path;            // target without query string (and scheme/authority for absolute-form)
  int version = 11;            // 10 or 11
  HeaderFields headers;        // in order, names as sent
  std::string body;            // decoded from chunked coding when it was chunked
  bool keep_alive = true;      // what the client asked for (version + Connection)
  std::string remote_addr;
  int remote_port = 0;

  // The first field of that name (case-insensitive), or null.
  const std::string* header(std::string_view name) const;
  size_t count(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  HeaderFields headers;  // extra fields (CORS, Allow, Cache-Control, ...)
  std::string body;
};

// Limits on a request's head, checked before its body is read.
struct HeadLimits {
  size_t max_line_bytes = 8192;  // request target; each header field line
};

// Why a request head is refused: a status and a message for the error object.
struct HeadRejection {
  int status;
  std::string message;
};

// Framing and syntax checks the parser leaves to us (RFC 9112 §3, §6.1, §6.3, §7; RFC 9110
// §7.2, §8.4): one valid Host on HTTP/1.1; Transfer-Encoding only as exactly "chunked" on
// HTTP/1.1 and never with Content-Length; no Content-Encoding but identity (415: the body limit
// counts bytes as received, so a compressed body could expand past it); field names and values
// free of control characters; target in origin-, absolute- or asterisk-form (OPTIONS) within
// max_line_bytes (414); every header line within max_line_bytes (431).
std::optional<HeadRejection> check_request_head(const HttpRequest& head, const HeadLimits& limits);

// The path part of a request target ("/v1/models?x=1" -> "/v1/models"; absolute-form
// "http://h/p" -> "/p"; "*" stays "*").
std::string target_path(std::string_view target);

std::string_view reason_phrase(int status);

// "HTTP/1.1 <status> <reason>" and the fields, with Content-Length and Connection; `head_only`
// (a HEAD request) leaves out the body but keeps its length.
std::string serialize_response(const HttpResponse& r, bool keep_alive, bool head_only = false);
// The head of a streamed response: chunked on HTTP/1.1, close-delimited (no length, then the
// connection closes) on HTTP/1.0.
std::string serialize_stream_head(const HttpResponse& r, bool chunked);
// One chunk of a chunked body; the empty string for empty data (an empty chunk would end it).
std::string chunk(std::string_view data);
std::string last_chunk();

// Request data made safe for a log line: control characters, bytes >= 0x7f (no raw 8-bit
// terminal controls), '"' and '\\' as \xNN, at most
// `max_bytes` kept (then "...").
std::string log_escape(std::string_view s, size_t max_bytes = 256);

}  // namespace fp4lm::server
