#include "model/engine_options.h"

#include "core/error.h"

namespace fp4lm::model {

std::optional<DType> parse_override_activation_dtype(const std::string& v) {
  if (v == "auto") return std::nullopt;
  if (v == "bfloat16") return DType::BF16;
  if (v == "float16") return DType::F16;
  usage_fail("override_activation_dtype must be auto, bfloat16 or float16 (got '{}')", v);
}

bool parse_activation_scale(const std::string& v) {
  if (v == "static") return false;
  if (v == "dynamic") return true;
  usage_fail("activation_scale must be static or dynamic (got '{}')", v);
}

std::optional<DType> parse_kv_cache_dtype(const std::string& v) {
  if (v == "auto") return std::nullopt;
  if (v == "float32") return DType::F32;
  if (v == "bfloat16") return DType::BF16;
  if (v == "float16") return DType::F16;
  if (v == "fp8") return DType::F8_E4M3;
  usage_fail("kv_cache_dtype must be auto, float32, bfloat16, float16 or fp8 (got '{}')", v);
}

DType resolve_dtype(const std::string& v, const std::string& checkpoint_dtype) {
  auto named = [](const std::string& s) -> std::optional<DType> {
    if (s == "float32") return DType::F32;
    if (s == "bfloat16") return DType::BF16;
    if (s == "float16") return DType::F16;
    return std::nullopt;
  };
  if (v == "auto") return named(checkpoint_dtype).value_or(DType::F32);
  if (auto d = named(v)) return *d;
  usage_fail("dtype must be auto, float32, bfloat16 or float16 (got '{}')", v);
}

}  // namespace fp4lm::model
