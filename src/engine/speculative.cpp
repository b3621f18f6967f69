#include "engine/speculative.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/request_error.h"
#include "io/json_file.h"

namespace fp4lm::engine {

namespace {
[[noreturn]] void bad(const std::string& msg) { throw RequestError("speculative_config: " + msg, "speculative_config"); }

int64_t int_field(const nlohmann::json& j, const char* key, int64_t lo, int64_t hi) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer()) bad(fmt::format("{} must be an integer, got {}", key, v.dump()));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad(fmt::format("{} must be in [{}, {}], got {}", key, lo, hi, x));
  return x;
}
}  // namespace

SpeculativeConfig parse_speculative_config(const std::string& text) {
  nlohmann::json j;
  try {
    j = io::parse_json(text, "--speculative-config");
  } catch (const std::exception& e) {
    bad(fmt::format("not JSON ({})", e.what()));
  }
  if (!j.is_object()) bad("must be a JSON object, e.g. {\"method\": \"ngram\", \"num_speculative_tokens\": 4}");
  SpeculativeConfig c;
  for (const auto& [key, v] : j.items())
    if (key != "method" && key != "num_speculative_tokens" && key != "prompt_lookup_max" &&
        key != "prompt_lookup_min")
      bad(fmt::format("unknown field '{}' (known: method, num_speculative_tokens, prompt_lookup_max, "
                      "prompt_lookup_min)",
                      key));
  if (!j.contains("method") || !j["method"].is_string())
    bad("method must be given as a string (\"ngram\" or \"mtp\")");
  c.method = j["method"].get<std::string>();
  // vLLM's model-specific MTP names for the heads fp4lm runs are the same method.
  if (c.method == "qwen3_next_mtp" || c.method == "qwen3_5_mtp") c.method = "mtp";
  if (c.method != "ngram" && c.method != "mtp")
    bad(fmt::format("method '{}' is not supported (supported: ngram; mtp, also spelled qwen3_next_mtp or "
                    "qwen3_5_mtp: the MTP head of Qwen3.5 / Qwen3.6 / Qwen3-Next checkpoints)",
                    c.method));
  if (c.method == "mtp")
    for (const char* key : {"prompt_lookup_max", "prompt_lookup_min"})
      if (j.contains(key)) bad(fmt::format("{} applies to method ngram only", key));
  if (!j.contains("num_speculative_tokens")) bad("num_speculative_tokens must be given");
  c.num_speculative_tokens = int_field(j, "num_speculative_tokens", 1, 16);
  const bool has_min = j.contains("prompt_lookup_min"), has_max = j.contains("prompt_lookup_max");
  if (has_min) c.prompt_lookup_min = int_field(j, "prompt_lookup_min", 1, 64);
  if (has_max) c.prompt_lookup_max = int_field(j, "prompt_lookup_max", 1, 64);
  else if (has_min) c.prompt_lookup_max = c.prompt_lookup_min;
  if (c.prompt_lookup_min > c.prompt_lookup_max)
    bad(fmt::format("prompt_lookup_min ({}) must be <= prompt_lookup_max ({})", c.prompt_lookup_min,
                    c.prompt_lookup_max));
  return c;
}

std::vector<int32_t> propose_ngram(std::span<const int32_t> h, const SpeculativeConfig& c, int64_t k) {
  const int64_t n_all = static_cast<int64_t>(h.size());
  for (int64_t n = std::min(c.prompt_lookup_max, n_all - 1); n >= c.prompt_lookup_min; --n) {
    const auto suffix = h.subspan(static_cast<size_t>(n_all - n));
    // The most recent earlier occurrence: it starts before n_all - n.
    for (int64_t start = n_all - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), h.begin() + start)) continue;
      const int64_t from = start + n, take = std::min(k, n_all - from);
      return {h.begin() + from, h.begin() + from + take};
    }
  }
  return {};
}

}  // namespace fp4lm::engine
