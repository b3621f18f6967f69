#pragma once
// The KV cache format a checkpoint declares (ModelOpt's kv_cache_quant_algo, compressed-tensors'
// kv_cache_scheme) against the one that runs (--kv-cache-dtype): one INFO line names both. A
// declared FP8 cache runs as FP8 under --kv-cache-dtype fp8 (its k_scale / v_scale), else in the
// activation dtype (vLLM's "auto"). A declared NVFP4, NVFP4_AFFINE or INT8 cache runs as declared
// under "auto" (model/state/kv_quant.h, with the layers' k/v scales and biases; TensorRT-LLM's reading of
// kv_cache_quant_algo); an explicit --kv-cache-dtype runs the cache in that dtype instead (the
// calibration tensors then unused, said in the same line).
#include <optional>
#include <string>

#include "core/dtype.h"
#include "model/state/kv_quant.h"

namespace fp4lm::model {

struct KvCacheFormat {
  DType dtype = DType::F32;        // the cache's dtype (a quantized format: the activation dtype, unused for K/V)
  KvQuant quant = KvQuant::none;   // a quantized row format every KV slot takes
  bool operator==(const KvCacheFormat&) const = default;
};

// What `inspect` and the load line call it: "bfloat16", "fp8", "NVFP4", ...
std::string kv_cache_format_name(const KvCacheFormat& f);

// The KV cache format to run. `declared`: the config's KV format (any case) or nullopt; `option`:
// --kv-cache-dtype as given ("auto", "fp8", ...); `act`: the activation dtype; `source` names the
// config file in messages. Error for a declared format fp4lm does not know.
KvCacheFormat resolve_kv_cache_format(const std::optional<std::string>& declared, const std::string& option, DType act,
                                      const std::string& source);

}  // namespace fp4lm::model
