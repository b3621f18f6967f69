#include "io/hub_http.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include <curl/curl.h>

#include "io/hub_cache.h"

namespace fp4lm::io::hub {
namespace {

constexpr int kMaxRedirects = 10;
constexpr size_t kMaxKeptBody = 1 << 20;

struct Transfer {
  HttpResult* result = nullptr;
  const BodySink* sink = nullptr;
  bool aborted = false;
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string line(data, size * n);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a 100 Continue, say): start over
    t->result->headers.clear();
    const size_t sp = line.find(' ');
    t->result->status = sp == std::string::npos ? 0 : std::atol(line.c_str() + sp + 1);
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = line.substr(0, colon);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  size_t v = colon + 1;
  while (v < line.size() && (line[v] == ' ' || line[v] == '\t')) ++v;
  t->result->headers[name] = line.substr(v);
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  const long s = t->result->status;
  if (*t->sink && s >= 200 && s < 300) {
    if (!(*t->sink)(s, data, bytes)) {
      t->aborted = true;
      return 0;  // CURLE_WRITE_ERROR
    }
    return bytes;
  }
  if (t->result->body.size() < kMaxKeptBody)
    t->result->body.append(data, std::min(bytes, kMaxKeptBody - t->result->body.size()));
  return bytes;
}

std::string read_token_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  std::string t((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t a = t.find_first_not_of(" \t\r\n"), b = t.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : t.substr(a, b - a + 1);
}

// Whether curl's failure happened before any byte of a response: the Hub is not reachable.
bool is_unreachable(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string HttpResult::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

std::string hub_endpoint() {
  const char* e = std::getenv("HF_ENDPOINT");
  std::string s = e && *e ? e : "https://huggingface.co";
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

std::string hub_token() {
  if (const char* t = std::getenv("HF_TOKEN"); t && *t) return t;
  if (const char* p = std::getenv("HF_TOKEN_PATH"); p && *p) return read_token_file(p);
  return read_token_file((hf_home() / "token").string());
}

std::string url_origin(const std::string& url) {
  CURLU* u = curl_url();
  std::string origin;
  if (curl_url_set(u, CURLUPART_URL, url.c_str(), 0) == CURLUE_OK) {
    char *scheme = nullptr, *host = nullptr, *port = nullptr;
    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
    curl_url_get(u, CURLUPART_HOST, &host, 0);
    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
    if (scheme && host) {
      std::string h = host;
      std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
      origin = std::string(scheme) + "://" + h + ":" + (port ? port : "");
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
  }
  curl_url_cleanup(u);
  return origin;
}

std::string url_escape(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '~' || c == '-' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

HubHttp::HubHttp(std::string endpoint, std::string token) : endpoint_(std::move(endpoint)), token_(std::move(token)) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  endpoint_origin_ = url_origin(endpoint_);
  if (endpoint_origin_.empty()) usage_fail("HF_ENDPOINT: '{}' is not a URL", endpoint_);
  curl_ = curl_easy_init();
  if (!curl_) fail("libcurl: curl_easy_init failed");
}

HubHttp::~HubHttp() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

HttpResult HubHttp::get(const std::string& first_url, uint64_t range_from, const BodySink& sink, long stall_seconds) {
  CURL* c = static_cast<CURL*>(curl_);
  std::string url = first_url;
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    HttpResult r;
    r.url = url;
    Transfer t{&r, &sink};
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, stall_seconds);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "fp4lm (huggingface_hub cache layout)");
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_slist* hdrs = nullptr;
    // The token only to the Hub's origin (scheme, host and port), never to a redirect's CDN.
    if (!token_.empty() && url_origin(url) == endpoint_origin_)
      hdrs = curl_slist_append(hdrs, ("Authorization: Bearer " + token_).c_str());
    hdrs = curl_slist_append(hdrs, "Accept-Encoding: identity");
    if (range_from > 0) hdrs = curl_slist_append(hdrs, ("Range: bytes=" + std::to_string(range_from) + "-").c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    const CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(hdrs);
    if (rc != CURLE_OK) {
      if (t.aborted) fail("{}: download aborted", url);
      const std::string why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
      if (r.status == 0 && (is_unreachable(rc) || rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_RECV_ERROR))
        throw HubUnreachable(fmt::format("{}: {}", url_origin(url), why));
      throw TransferCut(fmt::format("{}: transfer cut: {}", url, why));
    }
    if (r.status >= 300 && r.status < 400 && r.status != 304) {
      char* next = nullptr;
      curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &next);
      if (!next) fail("{}: HTTP {} without a Location", url, r.status);
      url = next;
      continue;
    }
    return r;
  }
  fail("{}: more than {} redirects", first_url, kMaxRedirects);
}

}  // namespace fp4lm::io::hub
