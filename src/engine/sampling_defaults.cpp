#include "engine/sampling_defaults.h"

#include <algorithm>

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

int64_t default_max_tokens(int64_t max_model_len, int64_t prompt_len, int64_t canvas_length,
                           std::optional<int64_t> cap) {
  int64_t left = max_model_len - prompt_len;
  if (canvas_length > 0) left = left / canvas_length * canvas_length;
  if (cap) left = std::min(left, *cap);
  return std::max<int64_t>(1, left);
}

}  // namespace fp4lm::engine
