#include "cli/engine_flags.h"

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/registry.h"

namespace fp4lm::cli {

void add_engine_flags(CLI::App& sub, EngineFlags& f, bool with_dtype) {
  if (with_dtype)
    sub.add_option("--dtype", f.dtype, "Activation/KV dtype: auto (checkpoint's), float32, bfloat16, float16");
  sub.add_option("--override-activation-dtype", f.override_activation_dtype,
                 "auto|bfloat16|float16: run NVFP4 W4A4 layers through the W4A16 path at this dtype");
  if (with_dtype)
    sub.add_option("--kv-cache-dtype", f.kv_cache_dtype,
                   "auto (= the activation dtype)|float32|bfloat16|float16|fp8 (E4M3 with the checkpoint's "
                   "k_scale/v_scale)");
  sub.add_option("--linear-backend", f.linear_backend, "Force a Linear kernel backend (see `fp4lm backends`)");
  sub.add_option("--moe-backend", f.moe_backend, "Force a MoE kernel backend (see `fp4lm backends`)");
  sub.add_option("--a16-max-tokens", f.a16_max_tokens,
                 "W4A4 layers: calls with at most N tokens use the W4A16 kernel (0 = off)");
  sub.add_option("--threads", f.threads, "Worker threads (default: physical cores)");
}

model::EngineOptions EngineFlags::resolve() const {
  model::EngineOptions o;
  o.dtype = dtype;
  model::resolve_dtype(dtype, "");  // validates the spelling now (auto is resolved at load)
  o.override_activation_dtype = model::parse_override_activation_dtype(override_activation_dtype);
  model::parse_kv_cache_dtype(kv_cache_dtype);  // validates the spelling
  o.kv_cache_dtype = kv_cache_dtype;
  auto check_backend = [](const std::string& name, kernels::LayerKind kind, const char* flag) {
    if (name.empty() || kernels::find_backend(name, kind)) return;
    std::string names;
    for (const auto* b : kernels::backends(kind)) names += (names.empty() ? "" : ", ") + b->name;
    usage_fail("{}: unknown backend '{}' (available: {})", flag, name, names);
  };
  check_backend(linear_backend, kernels::LayerKind::linear, "--linear-backend");
  check_backend(moe_backend, kernels::LayerKind::moe, "--moe-backend");
  o.linear_backend = linear_backend;
  o.moe_backend = moe_backend;
  if (a16_max_tokens < 0) usage_fail("--a16-max-tokens must be >= 0 (got {})", a16_max_tokens);
  o.a16_max_tokens = a16_max_tokens;
  if (threads < 0) usage_fail("--threads must be >= 1 (got {})", threads);
  o.threads = threads;
  if (threads > 0) ThreadPool::set_global_threads(threads);
  return o;
}

}  // namespace fp4lm::cli
