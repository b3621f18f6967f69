#pragma once
// Typed, checked reads of config.json fields: every defect is an Error naming the file and the
// field, what was expected and what was found. The shared parser and each ArchDef read through it.
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fp4lm::model {

struct ConfigReader {
  const nlohmann::json& j;
  const std::string& path;

  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
  template <typename T>
  T req(const char* key) const {
    if (!has(key)) fail("{}: missing required field '{}'", path, key);
    return get<T>(key);
  }
  template <typename T>
  T opt(const char* key, T def) const {
    if (!has(key)) return def;
    return get<T>(key);
  }
  template <typename T>
  T get(const char* key) const {
    const nlohmann::json& v = j[key];
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) fail("{}: field '{}' must be a boolean, found {}", path, key, v.dump());
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer()) fail("{}: field '{}' must be an integer, found {}", path, key, v.dump());
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) fail("{}: field '{}' must be a number, found {}", path, key, v.dump());
    } else {
      if (!v.is_string()) fail("{}: field '{}' must be a string, found {}", path, key, v.dump());
    }
    return v.get<T>();
  }
  // An optional list of integers (absent or null -> empty).
  std::vector<int64_t> int_list(const char* key) const {
    std::vector<int64_t> out;
    if (!has(key)) return out;
    if (!j[key].is_array()) fail("{}: field '{}' must be a list", path, key);
    for (const nlohmann::json& v : j[key]) {
      if (!v.is_number_integer()) fail("{}: field '{}' must hold integers", path, key);
      out.push_back(v.get<int64_t>());
    }
    return out;
  }
  void positive(const char* key, int64_t v) const {
    if (v <= 0) fail("{}: field '{}' must be positive, found {}", path, key, v);
  }
};

}  // namespace fp4lm::model
