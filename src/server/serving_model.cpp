#include "server/serving_model.h"

#include <filesystem>

#include "io/json_file.h"

namespace fp4lm::server {

SamplingDefaults read_sampling_defaults(const std::string& dir) {
  SamplingDefaults d;
  const auto path = std::filesystem::path(dir) / "generation_config.json";
  if (!std::filesystem::exists(path)) return d;
  const nlohmann::json j = io::read_json_file(path.string());
  auto num = [&](const char* key, std::optional<double>& out) {
    if (j.contains(key) && j[key].is_number()) out = j[key].get<double>();
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

}  // namespace fp4lm::server
