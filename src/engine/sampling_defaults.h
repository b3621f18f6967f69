#pragma once
// The request defaults a checkpoint's generation_config.json gives, read once for every front end
// (the server's requests and /props, fp4lm.LLM's get_default_sampling_params): the keys vLLM
// takes from it (ModelConfig.get_diff_sampling_param), request fields winning over them.
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

namespace fp4lm::engine {

struct SamplingDefaults {
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k, max_tokens;  // max_tokens from max_new_tokens
};

// From a generation_config.json already parsed (io::Checkpoint::generation_config(): an object, or
// absent when the checkpoint has none). Absent keys, and keys of another JSON type, stay unset, as
// vLLM. The server and fp4lm.LLM pass their loaded checkpoint's, so the file is parsed once.
SamplingDefaults sampling_defaults_from(const std::optional<nlohmann::json>& generation_config);

// vLLM's max_tokens for a request that leaves it out, the one rule of every front end: what the
// prompt leaves of the context (whole canvases of `canvas_length` for a DiffusionGemma, 0 for a
// CausalLM), lowered to `cap` when given (the server's: its endpoint's default and
// generation_config.json's max_new_tokens), at least 1 (a prompt that fills the context is the
// validator's error, engine/request.h).
int64_t default_max_tokens(int64_t max_model_len, int64_t prompt_len, int64_t canvas_length,
                           std::optional<int64_t> cap = std::nullopt);

}  // namespace fp4lm::engine
