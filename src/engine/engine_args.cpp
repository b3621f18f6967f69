#include "engine/engine_args.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/thread_pool.h"
#include "engine/request_error.h"
#include "engine/speculative.h"
#include "kernels/registry.h"
#include "model/load/memory_fit.h"

namespace fp4lm::engine {

namespace {

void check_backend(const std::string& name, kernels::LayerKind kind, const char* param) {
  if (name.empty() || kernels::find_backend(name, kind)) return;
  std::string names;
  for (const auto* b : kernels::backends(kind)) names += (names.empty() ? "" : ", ") + b->name;
  throw RequestError(fmt::format("{}: unknown backend '{}' (available: {})", param, name, names), param);
}

}  // namespace

model::EngineOptions resolve(const EngineArgs& a) {
  model::EngineOptions o;
  model::resolve_dtype(a.dtype, "");  // validates the spelling now (auto is resolved at load)
  o.dtype = a.dtype;
  o.override_activation_dtype = model::parse_override_activation_dtype(a.override_activation_dtype);
  o.dynamic_activation_scale = model::parse_activation_scale(a.activation_scale);
  model::parse_kv_cache_dtype(a.kv_cache_dtype);  // validates the spelling
  o.kv_cache_dtype = a.kv_cache_dtype;
  check_backend(a.linear_backend, kernels::LayerKind::linear, "linear_backend");
  check_backend(a.moe_backend, kernels::LayerKind::moe, "moe_backend");
  o.linear_backend = a.linear_backend;
  o.moe_backend = a.moe_backend;
  if (a.a16_max_tokens < 0)
    throw RequestError(fmt::format("a16_max_tokens must be >= 0, got {}", a.a16_max_tokens), "a16_max_tokens");
  o.a16_max_tokens = a.a16_max_tokens;
  if (a.threads < 0) throw RequestError(fmt::format("threads must be >= 1, got {}", a.threads), "threads");
  if (a.threads > ThreadPool::max_threads())
    throw RequestError(fmt::format("threads must be at most {} (4 x the {} hardware threads), got {}",
                                   ThreadPool::max_threads(), ThreadPool::max_threads() / 4, a.threads),
                       "threads");
  if (a.max_model_len < 0)
    throw RequestError(fmt::format("max_model_len must be positive, got {}", a.max_model_len), "max_model_len");
  if (a.threads > 0) ThreadPool::set_global_threads(a.threads);
  return o;
}

model::LoadOptions load_options(const EngineArgs& a) {
  model::LoadOptions lo;
  lo.max_model_len = a.max_model_len;
  return lo;
}

size_t default_kv_cache_bytes() {
  const size_t ram = model::physical_ram_bytes();  // the loader's own RAM reading (model/load/memory_fit.h)
  return ram > 0 ? ram / 4 : (size_t{4} << 30);
}

EngineConfig create_engine_config(const EngineArgs& a) {
  EngineConfig c;
  c.model = resolve(a);
  c.load = load_options(a);
  SchedulerConfig& s = c.scheduler;
  s.max_num_seqs = a.max_num_seqs;
  s.max_num_batched_tokens = a.max_num_batched_tokens;
  s.kv_cache_bytes = a.kv_cache_memory_bytes > 0 ? a.kv_cache_memory_bytes : default_kv_cache_bytes();
  s.enable_prefix_caching = a.enable_prefix_caching;
  s.block_size = a.block_size;
  if (a.max_logprobs < -1)
    throw RequestError(fmt::format("max_logprobs must be -1 (no cap) or at least 0, got {}", a.max_logprobs),
                       "max_logprobs");
  s.max_logprobs = a.max_logprobs;
  check_config(s);
  if (!a.speculative_config.empty()) s.speculative = parse_speculative_config(a.speculative_config);
  if (a.pipeline_parallel_size < 1)
    throw RequestError(fmt::format("pipeline_parallel_size must be >= 1, got {}", a.pipeline_parallel_size),
                       "pipeline_parallel_size");
  c.pipeline_parallel_size = a.pipeline_parallel_size;
  c.load.mtp = s.speculative.method == "mtp";
  if (c.load.mtp && c.pipeline_parallel_size > 1)
    throw RequestError(fmt::format("speculative_config: method mtp does not run over pipeline stages "
                                   "(pipeline_parallel_size {})",
                                   c.pipeline_parallel_size),
                       "speculative_config");
  return c;
}

std::string flag_spelling(const std::string& param) {
  std::string f = "--" + param;
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

std::string with_flag_spelling(const RequestError& e) {
  const std::string msg = e.what();
  if (e.param.empty()) return msg;
  const std::string flag = flag_spelling(e.param);
  if (msg.compare(0, e.param.size(), e.param) == 0 && msg.size() > e.param.size() &&
      (msg[e.param.size()] == ' ' || msg[e.param.size()] == ':'))
    return flag + msg.substr(e.param.size());
  return flag + ": " + msg;
}

}  // namespace fp4lm::engine
