#include "server/request_fields.h"

#include <fmt/format.h>

#include "server/api_error.h"

namespace fp4lm::server {

using nlohmann::json;

namespace {

const std::string& or_key(const std::string& name, const char* key, std::string& buf) {
  if (!name.empty()) return name;
  buf = key;
  return buf;
}

// A JSON value shown in a message: short, and escaped (dump() escapes control characters).
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  return s;
}

// The integer a JSON number holds, if it is one that fits int64 (5.0 counts; 1e30 does not).
std::optional<int64_t> as_int64(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // [-2^63, 2^63) is exactly representable at both ends; NaN fails both comparisons.
    if (!(d >= -0x1p63 && d < 0x1p63) || d != static_cast<double>(static_cast<int64_t>(d))) return std::nullopt;
    return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

}  // namespace

bool present(const json& b, const char* key) { return b.is_object() && b.contains(key) && !b[key].is_null(); }

std::optional<int64_t> opt_int(const json& b, const char* key, int64_t lo, int64_t hi, const std::string& name_in) {
  if (!present(b, key)) return std::nullopt;
  std::string buf;
  const std::string& name = or_key(name_in, key, buf);
  const json& v = b[key];
  if (!v.is_number()) throw bad_request(fmt::format("'{}' must be an integer, got {}", name, shown(v)), name);
  const std::optional<int64_t> i = as_int64(v);
  if (!i)
    throw bad_request(fmt::format("'{}' must be an integer in [{}, {}], got {}", name, lo, hi, shown(v)), name);
  if (*i < lo || *i > hi)
    throw bad_request(fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, *i), name);
  return i;
}

std::optional<double> opt_num(const json& b, const char* key, const std::string& name_in) {
  if (!present(b, key)) return std::nullopt;
  std::string buf;
  const std::string& name = or_key(name_in, key, buf);
  if (!b[key].is_number()) throw bad_request(fmt::format("'{}' must be a number, got {}", name, shown(b[key])), name);
  return b[key].get<double>();
}

std::optional<bool> opt_bool(const json& b, const char* key, const std::string& name_in) {
  if (!present(b, key)) return std::nullopt;
  std::string buf;
  const std::string& name = or_key(name_in, key, buf);
  if (!b[key].is_boolean())
    throw bad_request(fmt::format("'{}' must be a boolean, got {}", name, shown(b[key])), name);
  return b[key].get<bool>();
}

std::optional<std::string> opt_string(const json& b, const char* key, const std::string& name_in) {
  if (!present(b, key)) return std::nullopt;
  std::string buf;
  const std::string& name = or_key(name_in, key, buf);
  if (!b[key].is_string()) throw bad_request(fmt::format("'{}' must be a string, got {}", name, shown(b[key])), name);
  return b[key].get<std::string>();
}

std::vector<int32_t> token_ids(const json& list, const std::string& name, int64_t vocab) {
  if (!list.is_array()) throw bad_request(fmt::format("'{}' must be a list of integer token ids", name), name);
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (const json& x : list) {
    const std::optional<int64_t> id = x.is_number() ? as_int64(x) : std::nullopt;
    if (!id || x.is_number_float())
      throw bad_request(fmt::format("'{}' must be a list of integer token ids, found {}", name, shown(x)), name);
    if (*id < 0 || *id >= vocab)
      throw bad_request(fmt::format("'{}': token id {} is outside the vocabulary [0, {})", name, *id, vocab), name);
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

}  // namespace fp4lm::server
