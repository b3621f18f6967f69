#include "engine/engine_args.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/thread_pool.h"
#include "engine/request_error.h"
#include "kernels/registry.h"

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

SchedulerConfig scheduler_config(int64_t max_num_seqs, int64_t max_num_batched_tokens, size_t kv_cache_bytes) {
  SchedulerConfig c;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = max_num_batched_tokens;
  c.kv_cache_bytes = kv_cache_bytes;
  check_config(c);
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
