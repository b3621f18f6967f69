#pragma once
// An image's URL from a front end (the server's `image_url` parts) to the file's bytes, as vLLM's
// MediaConnector reads them: `data:<media type>;base64,<data>` (RFC 2397; base64 only, as vLLM),
// `file://` only under an allowed directory (vLLM's --allowed-local-media-path; symlinks resolved
// before the check), `http(s)://` only to a host listed in --allowed-media-domains (vLLM's flag;
// here fetching is off without it), anything else refused. Every error is a RequestError naming the image
// (`name`, "image 2") and what was expected versus found; nothing is read past `max_bytes`.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fp4lm::engine {

struct MediaUrlOptions {
  std::string allowed_local_media_path;  // canonical directory; empty: file:// URLs are refused
  uint64_t max_bytes = 64ull << 20;      // the image file (vision::ImageLimits::max_bytes)
  // Hosts http(s) URLs may name (lower case, exact match); empty: remote URLs are refused.
  std::vector<std::string> allowed_media_domains;
  long fetch_timeout_seconds = 5;  // the whole transfer (vLLM's VLLM_IMAGE_FETCH_TIMEOUT default)
  // How the front end spells the two settings in its messages (serve's flags; fp4lm.LLM's
  // constructor arguments).
  std::string local_path_option = "--allowed-local-media-path";
  std::string domains_option = "--allowed-media-domains";
};

// The bytes of `url` (a remote one fetched with io::http_get_bounded: no redirects, the size
// and time bounded).
std::vector<uint8_t> load_media_url(const std::string& url, const MediaUrlOptions& options, const std::string& name);

// Standard base64 (RFC 4648's alphabet; `=` padding optional, only at the end; ASCII whitespace
// skipped, as line-wrapped encoders write it). RequestError naming the image and the offset of
// the first character that is not base64, or when the decoded size would pass `max_bytes`.
std::vector<uint8_t> decode_base64(std::string_view data, uint64_t max_bytes, const std::string& name);

// --allowed-local-media-path: the directory made canonical. UsageError naming `option` when it
// does not exist or is not a directory (as vLLM checks it at startup).
std::string canonical_media_dir(const std::string& dir, const std::string& option = "--allowed-local-media-path");

// --allowed-media-domains: host names, each entry one name or several separated by spaces or
// commas (vLLM's flag takes a space-separated list), lower-cased. UsageError naming `option` and
// the entry for anything that is not a host name (a scheme, a path, a port, user info).
std::vector<std::string> media_domains(const std::vector<std::string>& entries,
                                       const std::string& option = "--allowed-media-domains");

}  // namespace fp4lm::engine
