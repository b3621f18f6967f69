#include "io/http_fetch.h"

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>

#include <curl/curl.h>
#include <fmt/format.h>

#include "core/error.h"

namespace fp4lm::io {

namespace {

struct Transfer {
  std::vector<uint8_t> body;
  uint64_t max_bytes = 0;
  bool too_big = false;
};

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  if (t->body.size() + bytes > t->max_bytes) {
    t->too_big = true;
    return 0;  // aborts the transfer
  }
  t->body.insert(t->body.end(), reinterpret_cast<uint8_t*>(data), reinterpret_cast<uint8_t*>(data) + bytes);
  return bytes;
}

}  // namespace

std::string url_host(const std::string& url) {
  std::unique_ptr<CURLU, decltype(&curl_url_cleanup)> u(curl_url(), curl_url_cleanup);
  if (!u || curl_url_set(u.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) return "";
  char* host = nullptr;
  if (curl_url_get(u.get(), CURLUPART_HOST, &host, 0) != CURLUE_OK || !host) return "";
  std::string out = host;
  curl_free(host);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::vector<uint8_t> http_get_bounded(const std::string& url, uint64_t max_bytes, long timeout_seconds) {
  static std::once_flag once;  // libcurl's global init is not thread-safe: once, before any transfer
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> c(curl_easy_init(), curl_easy_cleanup);
  if (!c) fail("cannot start a transfer (curl_easy_init failed)");
  Transfer t;
  t.max_bytes = max_bytes;
  char err[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(c.get(), CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c.get(), CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c.get(), CURLOPT_TIMEOUT, timeout_seconds);
  curl_easy_setopt(c.get(), CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(max_bytes));
  curl_easy_setopt(c.get(), CURLOPT_USERAGENT, "fp4lm (image_url)");
  curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c.get(), CURLOPT_ERRORBUFFER, err);
  const CURLcode rc = curl_easy_perform(c.get());
  if (t.too_big || rc == CURLE_FILESIZE_EXCEEDED)
    fail("the response is larger than the {} bytes an image may have", max_bytes);
  if (rc == CURLE_OPERATION_TIMEDOUT) fail("no complete response within {} s", timeout_seconds);
  if (rc != CURLE_OK) fail("{}", err[0] ? err : curl_easy_strerror(rc));
  long status = 0;
  curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &status);
  if (status >= 300 && status < 400) fail("HTTP {} (a redirect; redirects are not followed)", status);
  if (status != 200) fail("HTTP {}", status);
  return std::move(t.body);
}

}  // namespace fp4lm::io
