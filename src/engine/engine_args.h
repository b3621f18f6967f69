#pragma once
// The one place that turns engine option values, as the CLI flags and the Python LLM(...) keywords
// give them, into model::EngineOptions / model::LoadOptions / SchedulerConfig. Errors are
// RequestErrors naming the parameter as the library spells it (`linear_backend`,
// `max_model_len`); each front end adds its own spelling (`--linear-backend`).
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/request_error.h"
#include "engine/scheduler.h"
#include "model/causal_lm.h"
#include "model/engine_options.h"

namespace fp4lm::engine {

struct EngineArgs {
  std::string dtype = "auto";
  std::string override_activation_dtype = "auto";
  std::string activation_scale = "static";  // "static" | "dynamic" (NVFP4 W4A4 per-token scales)
  std::string kv_cache_dtype = "auto";
  std::string linear_backend, moe_backend;  // "" = the oracle picks
  int64_t a16_max_tokens = 0;
  int threads = 0;                          // 0 = leave the worker pool as it is (physical cores)
  int64_t max_model_len = 0;                // 0 = the model's default
};

// Validates every value and applies `threads` to the global worker pool (the only thing that
// reads it). Bad values: RequestError naming the parameter (dtype spellings: the model layer's
// UsageError).
model::EngineOptions resolve(const EngineArgs& a);
model::LoadOptions load_options(const EngineArgs& a);

// Serving limits: RequestError naming the parameter when inconsistent.
SchedulerConfig scheduler_config(int64_t max_num_seqs, int64_t max_num_batched_tokens, size_t kv_cache_bytes);

// "max_model_len" -> "--max-model-len": the CLI's spelling of a library parameter.
std::string flag_spelling(const std::string& param);
// The error's message with its parameter in the CLI's spelling: "max_tokens must be at least 1"
// -> "--max-tokens must be at least 1"; other messages get the flag as a prefix.
std::string with_flag_spelling(const RequestError& e);

}  // namespace fp4lm::engine
