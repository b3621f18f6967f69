#include "server/api_key.h"

#include <fstream>

#include "core/error.h"

namespace fp4lm::server {

bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < b.size(); ++i) {
    const unsigned char x = a.empty() ? 0 : static_cast<unsigned char>(a[i % a.size()]);
    diff |= x ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

bool authorized(const std::string* authorization, const std::string& key) {
  if (key.empty()) return true;
  return authorization && constant_time_equal(*authorization, "Bearer " + key);
}

namespace {

void check_key(const std::string& key, const std::string& source) {
  if (key.empty()) usage_fail("{}: the API key is empty (omit it to serve without authentication)", source);
  for (char c : key) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f)
      usage_fail("{}: the API key holds a space or control character, which an Authorization field cannot carry",
                 source);
  }
}

}  // namespace

std::optional<std::string> resolve_api_key(const std::optional<std::string>& flag, const std::string& file,
                                           const char* env_value) {
  if (flag && !file.empty()) usage_fail("give --api-key or --api-key-file, not both");
  if (flag) {
    check_key(*flag, "--api-key");
    return flag;
  }
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) usage_fail("--api-key-file {}: cannot read it", file);
    std::string key;
    std::getline(in, key);
    if (!key.empty() && key.back() == '\r') key.pop_back();
    check_key(key, "--api-key-file " + file);
    return key;
  }
  if (env_value) {
    const std::string key = env_value;
    check_key(key, "FP4LM_API_KEY");
    return key;
  }
  return std::nullopt;
}

}  // namespace fp4lm::server
