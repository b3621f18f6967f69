#pragma once
// HTTP to the Hugging Face Hub through libcurl (TLS, proxies from the environment). The one file
// with curl.h. Redirects are followed here, not by libcurl, so that the token goes only to the
// Hub's own origin: a 302 to another host (the CDN of LFS files) gets no Authorization header.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"

namespace fp4lm::io::hub {

// The Hub could not be reached at all (DNS, connect, timeout, TLS, or a 5xx): callers may fall
// back to the cache.
class HubUnreachable : public Error {
 public:
  explicit HubUnreachable(const std::string& what) : Error(what) {}
};

struct HttpResult {
  long status = 0;
  std::map<std::string, std::string> headers;  // of the final response; names in lowercase
  std::string body;                             // unless a sink took it (at most 1 MiB kept)
  std::string url;                              // the final URL
  std::string header(const std::string& lowercase_name) const;
};

// Called with each chunk of a 2xx body and the response's status (200, or 206 for a Range);
// returns false to abort (get() then throws an Error; the sink keeps its own reason).
using BodySink = std::function<bool(long status, const char* data, size_t n)>;

// The endpoint (HF_ENDPOINT, else https://huggingface.co, without a trailing '/').
std::string hub_endpoint();
// HF_TOKEN, else the file HF_TOKEN_PATH, else $HF_HOME/token; "" when none. Never logged.
std::string hub_token();
// "scheme://host:port" of a URL, the port made explicit.
std::string url_origin(const std::string& url);
// Percent-encodes every byte outside [A-Za-z0-9._~-], and '/' too unless `keep_slash`.
std::string url_escape(const std::string& s, bool keep_slash);

class HubHttp {
 public:
  HubHttp(std::string endpoint, std::string token);
  ~HubHttp();
  HubHttp(const HubHttp&) = delete;
  HubHttp& operator=(const HubHttp&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  bool has_token() const { return !token_.empty(); }

  // GET `url` (absolute), following up to 10 redirects. `range_from` > 0 sends
  // "Range: bytes=N-". `sink`, when given, receives the final 2xx body. `stall_seconds`: the
  // transfer fails when no byte arrives for that long. Throws HubUnreachable on a network
  // failure before any response; a dropped connection mid-body is an Error (with the status kept).
  HttpResult get(const std::string& url, uint64_t range_from = 0, const BodySink& sink = {},
                 long stall_seconds = 30);

 private:
  std::string endpoint_, endpoint_origin_, token_;
  void* curl_ = nullptr;
};

// A transfer cut short after its response began (connection dropped, stall): the caller may
// resume with a Range request.
class TransferCut : public Error {
 public:
  explicit TransferCut(const std::string& what) : Error(what) {}
};

}  // namespace fp4lm::io::hub
