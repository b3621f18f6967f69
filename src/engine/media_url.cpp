#include "engine/media_url.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/error.h"
#include "engine/request_error.h"
#include "io/http_fetch.h"

namespace fp4lm::engine {

namespace fs = std::filesystem;

namespace {

// A client's string in an error message: at most 80 bytes, control bytes escaped.
std::string shown(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 80)) {
    const auto u = static_cast<unsigned char>(c);
    out += u < 0x20 || u == 0x7f ? fmt::format("\\x{:02x}", u) : std::string(1, c);
  }
  if (s.size() > 80) out += fmt::format("... ({} bytes)", s.size());
  return "'" + out + "'";
}

[[noreturn]] void refuse(const std::string& name, const std::string& what) {
  throw RequestError(fmt::format("{}: {}", name, what), "image");
}

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

int base64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// data:[<media type>][;param=value]*;base64,<data>
std::vector<uint8_t> load_data_url(std::string_view url, const MediaUrlOptions& o, const std::string& name) {
  const std::string_view rest = url.substr(5);
  const size_t comma = rest.find(',');
  if (comma == std::string_view::npos)
    refuse(name, fmt::format("a data: URL needs a ',' before its data, got {}", shown(url)));
  const std::string_view spec = rest.substr(0, comma);
  const size_t last_semi = spec.rfind(';');
  if (last_semi == std::string_view::npos || spec.substr(last_semi + 1) != "base64")
    refuse(name, fmt::format("only base64 data URLs are supported ('data:image/png;base64,...'), got {}",
                             shown(url.substr(0, 5 + comma + 1))));
  const std::string_view media_type = spec.substr(0, spec.find(';'));
  if (!starts_with_nocase(media_type, "image/"))
    refuse(name, fmt::format("a data: URL of media type {}; expected an image (image/png, image/jpeg, image/webp)",
                             shown(media_type)));
  return decode_base64(rest.substr(comma + 1), o.max_bytes, name);
}

std::string percent_decoded(std::string_view s, const std::string& name) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    auto hex = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    if (i + 2 >= s.size() || hex(s[i + 1]) < 0 || hex(s[i + 2]) < 0)
      refuse(name, fmt::format("a file:// URL with a bad percent escape at byte {}", i));
    out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
    i += 2;
  }
  if (out.find('\0') != std::string::npos) refuse(name, "a file:// URL whose path holds a NUL byte");
  return out;
}

// True when `p` lies strictly inside directory `dir` (both canonical / lexically normal).
bool inside(const fs::path& p, const fs::path& dir) {
  auto d = dir.begin();
  auto q = p.begin();
  for (; d != dir.end(); ++d, ++q) {
    if (d->empty()) continue;  // a trailing separator's empty element
    if (q == p.end() || *q != *d) return false;
  }
  return q != p.end();
}

std::vector<uint8_t> load_file_url(std::string_view url, const MediaUrlOptions& o, const std::string& name) {
  if (o.allowed_local_media_path.empty())
    refuse(name, fmt::format("cannot load local files (file:// URLs) without `{}`", o.local_path_option));
  std::string_view rest = url.substr(7);
  const size_t slash = rest.find('/');
  const std::string_view host = rest.substr(0, slash);
  if (!host.empty() && host != "localhost")
    refuse(name, fmt::format("a file:// URL names host {}; only local paths (file:///path) are read", shown(host)));
  if (slash == std::string_view::npos) refuse(name, fmt::format("a file:// URL without a path: {}", shown(url)));
  std::string_view path = rest.substr(slash);
  path = path.substr(0, std::min(path.find('?'), path.find('#')));
  const fs::path given(percent_decoded(path, name));
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(given, ec);
  const fs::path allowed(o.allowed_local_media_path);
  if (ec || !inside(resolved, allowed))
    refuse(name, fmt::format("the file path {} must be a subpath of `{} {}`", shown(given.string()),
                             o.local_path_option, allowed.string()));
  // Non-blocking, so that a FIFO cannot hold the request; only a regular file is read.
  const int fd = ::open(resolved.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) refuse(name, fmt::format("cannot read {}: {}", shown(given.string()), std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    refuse(name, fmt::format("{} is not a regular file", shown(given.string())));
  if (static_cast<uint64_t>(st.st_size) > o.max_bytes)
    refuse(name, fmt::format("{} is {} bytes, more than the {} bytes an image may have", shown(given.string()),
                             st.st_size, o.max_bytes));
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) refuse(name, fmt::format("cannot read {}: {}", shown(given.string()), n < 0 ? std::strerror(errno) : "it shrank"));
    got += static_cast<size_t>(n);
  }
  return bytes;
}

}  // namespace

std::vector<uint8_t> decode_base64(std::string_view data, uint64_t max_bytes, const std::string& name) {
  if (data.size() / 4 * 3 > max_bytes + 3)
    refuse(name, fmt::format("{} bytes of base64 decode to more than the {} bytes an image may have", data.size(),
                             max_bytes));
  std::vector<uint8_t> out;
  out.reserve(data.size() / 4 * 3 + 3);
  uint32_t acc = 0;
  int bits = 0, pad = 0;
  size_t digits = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    const auto c = static_cast<unsigned char>(data[i]);
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++pad;
      continue;
    }
    const int v = base64_value(c);
    if (v < 0 || pad > 0)
      refuse(name, fmt::format("the data: URL's data is not base64: {} at offset {}",
                               v < 0 ? fmt::format("byte 0x{:02x}", c) : std::string("data after '=' padding"), i));
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    ++digits;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(acc >> bits));
      acc &= (1u << bits) - 1;
    }
  }
  if (digits % 4 == 1 || pad > 2 || (pad > 0 && (digits + static_cast<size_t>(pad)) % 4 != 0))
    refuse(name, fmt::format("the data: URL's data is not base64: {} characters and {} '=' do not make whole bytes",
                             digits, pad));
  if (out.size() > max_bytes)
    refuse(name, fmt::format("{} bytes, more than the {} bytes an image may have", out.size(), max_bytes));
  return out;
}

std::vector<uint8_t> load_media_url(const std::string& url, const MediaUrlOptions& options, const std::string& name) {
  if (starts_with_nocase(url, "data:")) return load_data_url(url, options, name);
  if (starts_with_nocase(url, "file://")) return load_file_url(url, options, name);
  if (starts_with_nocase(url, "http://") || starts_with_nocase(url, "https://")) {
    if (options.allowed_media_domains.empty())
      refuse(name, fmt::format("remote image URLs (http, https) are not fetched: remote fetching is not enabled "
                               "({}); send the image as a data: URL (data:image/png;base64,...) or as a file:// URL "
                               "under {}",
                               options.domains_option, options.local_path_option));
    const std::string host = io::url_host(url);
    const auto& allowed = options.allowed_media_domains;
    if (host.empty() || std::find(allowed.begin(), allowed.end(), host) == allowed.end())
      refuse(name, fmt::format("the URL must be from one of the allowed domains ({}), got host {}",
                               options.domains_option, shown(host)));
    try {
      return io::http_get_bounded(url, options.max_bytes, options.fetch_timeout_seconds);
    } catch (const Error& e) {
      refuse(name, fmt::format("fetching {}: {}", shown(url), e.what()));
    }
  }
  refuse(name, fmt::format("the URL must be a data:, file:// or http(s) URL, got {}", shown(url)));
}

std::string canonical_media_dir(const std::string& dir, const std::string& option) {
  std::error_code ec;
  const fs::path p = fs::canonical(dir, ec);
  if (ec) throw UsageError(fmt::format("{}: '{}': {}", option, dir, ec.message()));
  if (!fs::is_directory(p)) throw UsageError(fmt::format("{}: '{}' is not a directory", option, dir));
  return p.string();
}

std::vector<std::string> media_domains(const std::vector<std::string>& entries, const std::string& option) {
  std::vector<std::string> out;
  for (const std::string& entry : entries) {
    const size_t before = out.size();
    std::string d;
    auto flush = [&] {
      if (d.empty()) return;
      if (d.find_first_of("/:@") != std::string::npos)
        throw UsageError(fmt::format("{}: '{}' is not a host name (e.g. upload.wikimedia.org)", option, entry));
      out.push_back(std::exchange(d, {}));
    };
    for (unsigned char c : entry) {
      if (c == ',' || std::isspace(c)) flush();
      else d += static_cast<char>(std::tolower(c));
    }
    flush();
    if (out.size() == before)  // an empty entry, or separators only
      throw UsageError(fmt::format("{}: '{}' is not a host name (e.g. upload.wikimedia.org)", option, entry));
  }
  return out;
}

}  // namespace fp4lm::engine
