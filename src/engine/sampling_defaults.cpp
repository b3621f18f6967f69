#include "engine/sampling_defaults.h"

namespace fp4lm::engine {

SamplingDefaults sampling_defaults_from(const std::optional<nlohmann::json>& generation_config) {
  SamplingDefaults d;
  if (!generation_config || !generation_config->is_object()) return d;
  const nlohmann::json& j = *generation_config;
  auto num = [&](const char* key, std::optional<double>& out) {
    if (j.contains(key) && j[key].is_number()) out = j[key].get<double>();  // JSON true/false are not numbers
  };
  auto integer = [&](const char* key, std::optional<int64_t>& out) {
    if (j.contains(key) && j[key].is_number_integer()) out = j[key].get<int64_t>();
  };
  num("temperature", d.temperature);
  num("top_p", d.top_p);
  num("min_p", d.min_p);
  num("repetition_penalty", d.repetition_penalty);
  integer("top_k", d.top_k);
  integer("max_new_tokens", d.max_tokens);
  return d;
}

}  // namespace fp4lm::engine
