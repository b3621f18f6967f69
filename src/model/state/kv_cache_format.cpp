#include "model/state/kv_cache_format.h"

#include <cctype>

#include "core/error.h"
#include "core/log.h"
#include "model/engine_options.h"

namespace fp4lm::model {

namespace {
std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string kv_name(DType t) {
  return t == DType::F8_E4M3 ? "fp8 (E4M3, per-layer k/v scales)" : std::string(dtype_torch_name(t));
}
std::string_view describe(KvQuant q) {
  switch (q) {
    case KvQuant::nvfp4: return "E2M1 in 16-element blocks with E4M3 block scales and per-layer k/v scales";
    case KvQuant::nvfp4_affine: return "E2M1 in 16-element blocks with E4M3 block scales, per-layer k/v scales and k/v biases";
    case KvQuant::int8: return "int8 with per-layer k/v scales";
    case KvQuant::none: break;
  }
  return "";
}
}  // namespace

std::string kv_cache_format_name(const KvCacheFormat& f) {
  if (f.quant != KvQuant::none) return std::string(kv_quant_name(f.quant));
  return f.dtype == DType::F8_E4M3 ? "fp8" : std::string(dtype_torch_name(f.dtype));
}

KvCacheFormat resolve_kv_cache_format(const std::optional<std::string>& declared, const std::string& option, DType act,
                                      const std::string& source) {
  const std::optional<DType> chosen = parse_kv_cache_dtype(option);
  const DType kv = chosen.value_or(act);
  if (!declared) {
    log().info("KV cache: {} (the checkpoint declares no KV cache quantization)", kv_name(kv));
    return {kv};
  }
  const std::string d = upper(*declared);
  if (d == "FP8") {
    log().info("KV cache: {}; the checkpoint declares FP8 ({}){}", kv_name(kv), source,
               kv == DType::F8_E4M3 ? "" : ": --kv-cache-dtype fp8 runs it as declared");
    return {kv};
  }
  const std::optional<KvQuant> q = kv_quant_of(d);
  if (!q) fail("{}: kv_cache_quant_algo {} is not a KV cache format fp4lm knows (FP8, NVFP4, NVFP4_AFFINE, INT8)", source, d);
  if (!chosen) {
    log().info("KV cache: {} ({}), as the checkpoint declares it ({})", d, describe(*q), source);
    return {act, *q};
  }
  log().info("KV cache: {} by --kv-cache-dtype; the checkpoint declares {} ({}), run instead by --kv-cache-dtype auto",
             kv_name(kv), d, source);
  return {kv};
}

}  // namespace fp4lm::model
