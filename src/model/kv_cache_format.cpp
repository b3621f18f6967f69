#include "model/kv_cache_format.h"

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
std::string_view kv_name(DType t) { return t == DType::F8_E4M3 ? "fp8 (E4M3, per-layer k/v scales)" : dtype_torch_name(t); }
}  // namespace

DType resolve_kv_cache_format(const std::optional<std::string>& declared, const std::string& option, DType act,
                              const std::string& source) {
  const std::optional<DType> chosen = parse_kv_cache_dtype(option);
  const DType kv = chosen.value_or(act);
  if (!declared) {
    log().info("KV cache: {} (the checkpoint declares no KV cache quantization)", kv_name(kv));
    return kv;
  }
  const std::string d = upper(*declared);
  if (d == "FP8") {
    log().info("KV cache: {}; the checkpoint declares FP8 ({}){}", kv_name(kv), source,
               kv == DType::F8_E4M3 ? "" : ": --kv-cache-dtype fp8 runs it as declared");
    return kv;
  }
  if (!chosen)
    fail("{}: kv_cache_quant_algo {} (a {} KV cache) is not a KV cache format fp4lm runs (it runs FP8 or the "
         "activation dtype); pass --kv-cache-dtype bfloat16 (or float16 / float32 / fp8) to run the cache in that "
         "format instead, its calibration scales unused",
         source, d,
         d == "NVFP4"          ? "4-bit E2M1 with E4M3 block scales"
         : d == "NVFP4_AFFINE" ? "4-bit E2M1 with block scales and k/v biases"
         : d == "INT8"         ? "int8 per-tensor"
                               : "quantized");
  log().info("KV cache: {} by --kv-cache-dtype; the checkpoint declares {} ({}), which fp4lm does not run", kv_name(kv),
             d, source);
  return kv;
}

}  // namespace fp4lm::model
