#include "vision/processor_config_values.h"

#include <cmath>

#include "core/error.h"

namespace fp4lm::vision {

bool config_bool(const nlohmann::json& v, const std::string& where, const std::string& key) {
  if (!v.is_boolean()) fail("{}: \"{}\" must be true or false, found {}", where, key, v.dump());
  return v.get<bool>();
}

int64_t config_positive_int(const nlohmann::json& v, const std::string& where, const std::string& key, int64_t most) {
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > most)
    fail("{}: \"{}\" must be an integer in 1..{}, found {}", where, key, most, v.dump());
  return v.get<int64_t>();
}

double config_finite_number(const nlohmann::json& v, const std::string& where, const std::string& key) {
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    fail("{}: \"{}\" must be a finite number, found {}", where, key, v.dump());
  return v.get<double>();
}

std::array<float, 3> config_rgb_triple(const nlohmann::json& v, const std::string& where, const std::string& key) {
  if (v.is_number()) return {v.get<float>(), v.get<float>(), v.get<float>()};
  if (!v.is_array() || v.size() != 3 || !v[0].is_number() || !v[1].is_number() || !v[2].is_number())
    fail("{}: \"{}\" must be a number or 3 numbers (R, G, B), found {}", where, key, v.dump());
  return {v[0].get<float>(), v[1].get<float>(), v[2].get<float>()};
}

void check_image_std(const std::array<float, 3>& image_std, const std::string& where) {
  for (float v : image_std)
    if (!(v != 0.0f) || !std::isfinite(v)) fail("{}: \"image_std\" must be finite and non-zero, found {}", where, v);
}

}  // namespace fp4lm::vision
