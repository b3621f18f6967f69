#pragma once
// The request defaults a checkpoint's generation_config.json gives, read once for every front end
// (the server's requests and /props, fp4lm.LLM's get_default_sampling_params): the keys vLLM
// takes from it (ModelConfig.get_diff_sampling_param), request fields winning over them.
#include <cstdint>
#include <optional>
#include <string>

namespace fp4lm::engine {

struct SamplingDefaults {
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k, max_tokens;  // max_tokens from max_new_tokens
};

// Reads DIR/generation_config.json when present (absent keys, and keys of another JSON type,
// stay unset, as vLLM); Error naming the file on malformed JSON.
SamplingDefaults read_sampling_defaults(const std::string& dir);

}  // namespace fp4lm::engine
