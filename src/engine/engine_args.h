#pragma once
// The one place that turns engine option values, as the CLI flags and the Python LLM(...) keywords
// give them, into the settings a load and an engine run with (vLLM's EngineArgs -> VllmConfig):
// model::EngineOptions, model::LoadOptions, SchedulerConfig. Errors are RequestErrors naming the
// parameter as the library spells it (`linear_backend`, `max_model_len`); each front end adds its
// own spelling (`--linear-backend`). Settings that cannot go together are refused here, once.
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

  // The continuous-batching engine (`serve`, fp4lm.LLM); `generate` and `eval` run one request
  // and read only speculative_config and pipeline_parallel_size.
  int64_t max_num_seqs = 8;
  int64_t max_num_batched_tokens = 512;
  size_t kv_cache_memory_bytes = 0;   // the KV budget; 0 = a quarter of this machine's RAM
  bool enable_prefix_caching = true;  // engine/prefix_cache.h
  int64_t block_size = 16;            // tokens per cached block
  int64_t max_logprobs = kMaxLogprobs;  // -1: no cap
  std::string speculative_config;     // vLLM's JSON (engine/speculative.h); "" = off
  int pipeline_parallel_size = 1;     // stages under mpirun (dist/pipeline.h runs them)
};

// EngineArgs resolved and checked together.
struct EngineConfig {
  model::EngineOptions model;
  model::LoadOptions load;  // load.mtp: the speculative method is "mtp"
  SchedulerConfig scheduler;
  int pipeline_parallel_size = 1;
};

// Every value checked, the defaults applied (the KV budget), the combinations that cannot run
// refused (method "mtp" under a pipeline); applies `threads` to the worker pool as resolve() does.
EngineConfig create_engine_config(const EngineArgs& a);

// The KV budget when none is given: a quarter of this machine's RAM (4 GiB if unknown).
size_t default_kv_cache_bytes();

// Validates every value and applies `threads` to the global worker pool (the only thing that
// reads it). Bad values: RequestError naming the parameter (dtype spellings: the model layer's
// UsageError).
model::EngineOptions resolve(const EngineArgs& a);
model::LoadOptions load_options(const EngineArgs& a);

// "max_model_len" -> "--max-model-len": the CLI's spelling of a library parameter.
std::string flag_spelling(const std::string& param);
// The error's message with its parameter in the CLI's spelling: "max_tokens must be at least 1"
// -> "--max-tokens must be at least 1"; other messages get the flag as a prefix.
std::string with_flag_spelling(const RequestError& e);

}  // namespace fp4lm::engine
