#pragma once
// The KV cache format a checkpoint declares (ModelOpt's kv_cache_quant_algo, compressed-tensors'
// kv_cache_scheme) against the one that runs (--kv-cache-dtype): one INFO line names both. A
// declared FP8 cache runs as FP8 under --kv-cache-dtype fp8 (its k_scale / v_scale), else in the
// activation dtype (vLLM's "auto"). NVFP4, NVFP4_AFFINE and INT8 caches have no fp4lm format:
// with "auto" the load is refused naming the format, and an explicit 16/32-bit --kv-cache-dtype
// runs the cache at that precision (the calibration scales then unused, said in the same line).
#include <optional>
#include <string>

#include "core/dtype.h"

namespace fp4lm::model {

// The KV cache dtype to run. `declared`: the config's KV format (upper-case name) or nullopt;
// `option`: --kv-cache-dtype as given ("auto", "fp8", ...); `act`: the activation dtype; `source`
// names the config file in messages. Error for a declared format fp4lm cannot run under "auto".
DType resolve_kv_cache_format(const std::optional<std::string>& declared, const std::string& option, DType act,
                              const std::string& source);

}  // namespace fp4lm::model
