#pragma once
// One bounded HTTP(S) GET through libcurl, for media a request names by URL (the server's
// image_url parts under --allowed-media-domains): no redirects followed (a 3xx is an error, so
// that the allowed host is the one read), http and https only, the whole transfer cut at
// `timeout_seconds` and the body at `max_bytes` (from Content-Length when sent, else while it
// arrives). Proxies come from the environment, as for Hub downloads.
#include <cstdint>
#include <string>
#include <vector>

namespace fp4lm::io {

// The lower-cased host of an http(s) URL; "" when `url` is not one curl parses.
std::string url_host(const std::string& url);

// The body of a 200 response. Error saying why otherwise (the status, curl's reason, the size).
std::vector<uint8_t> http_get_bounded(const std::string& url, uint64_t max_bytes, long timeout_seconds);

}  // namespace fp4lm::io
