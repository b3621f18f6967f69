#include "engine/sampling_defaults.h"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "io/json_file.h"

namespace fp4lm::engine {

SamplingDefaults read_sampling_defaults(const std::string& dir) {
  SamplingDefaults d;
  const auto path = std::filesystem::path(dir) / "generation_config.json";
  if (!std::filesystem::exists(path)) return d;
  const nlohmann::json j = io::read_json_file(path.string());
  if (!j.is_object())
    throw Error(fmt::format("{}: expected a JSON object, found {}", path.string(), j.type_name()));
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
