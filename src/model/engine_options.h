#pragma once
// Engine-wide options every model-loading subcommand accepts (see cli/engine_flags.h).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace fp4lm::model {

class Linear;
class FusedMoe;

struct EngineOptions {
  // Activation / KV-cache dtype: "auto" (the checkpoint's torch_dtype), float32, bfloat16, float16.
  std::string dtype = "auto";
  // --override-activation-dtype: nullopt = auto (no change); BF16/F16 = run every NVFP4 W4A4
  // layer through the W4A16 path with that activation dtype. The checkpoint is never edited.
  std::optional<DType> override_activation_dtype;
  // --activation-scale: false = static (the checkpoint's input_scale; the default), true = dynamic
  // (every NVFP4 W4A4 layer quantizes each token with its own global scale computed from that
  // token's activations, quant::dynamic_activation_scale; the file's input_scale is not read).
  bool dynamic_activation_scale = false;
  // --kv-cache-dtype: "auto" (= the activation dtype, as vLLM), float32, bfloat16, float16, or
  // fp8 (E4M3 with the checkpoint's per-layer k_scale / v_scale; 1.0 when absent).
  std::string kv_cache_dtype = "auto";
  std::string linear_backend;  // --linear-backend: force one ("" = the oracle picks)
  std::string moe_backend;     // --moe-backend
  int64_t a16_max_tokens = 0;  // --a16-max-tokens
  // Called with every Linear / FusedMoe the loader builds: calibration (engine/quantize/calibration)
  // attaches its input observers here. Empty = nothing.
  std::function<void(Linear&)> on_linear_built;
  std::function<void(FusedMoe&)> on_moe_built;
};

// "auto" -> nullopt, "bfloat16"/"float16" -> the dtype; anything else -> UsageError.
std::optional<DType> parse_override_activation_dtype(const std::string& v);
// --activation-scale: "static" -> false, "dynamic" -> true; anything else -> UsageError.
bool parse_activation_scale(const std::string& v);
// --kv-cache-dtype: "auto" -> nullopt (the activation dtype), float32/bfloat16/float16 -> that,
// "fp8" -> F8_E4M3; anything else -> UsageError.
std::optional<DType> parse_kv_cache_dtype(const std::string& v);
// "float32"/"bfloat16"/"float16" -> the dtype; "auto" -> `checkpoint_dtype` mapped the same way
// (float32 when absent or not a 16/32-bit float); else UsageError.
DType resolve_dtype(const std::string& v, const std::string& checkpoint_dtype);

}  // namespace fp4lm::model
