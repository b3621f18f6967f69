#include "kernels/quant_key.h"

namespace fp4lm::kernels {

std::string_view weight_key_name(WeightKey k) {
  switch (k) {
    case WeightKey::unquantized: return "unquantized";
    case WeightKey::nvfp4_static: return "nvfp4_static";
    case WeightKey::fp8_static: return "fp8_static";
    case WeightKey::fp8_block: return "fp8_block";
    case WeightKey::mxfp4: return "mxfp4";
    case WeightKey::int4: return "int4";
    case WeightKey::int8: return "int8";
  }
  return "?";
}

std::string_view act_key_name(ActKey k) {
  switch (k) {
    case ActKey::none: return "none";
    case ActKey::nvfp4_dynamic: return "nvfp4_dynamic";
    case ActKey::fp8_static: return "fp8_static";
    case ActKey::fp8_group_dynamic: return "fp8_group_dynamic";
    case ActKey::mxfp8_dynamic: return "mxfp8_dynamic";
    case ActKey::int8_static: return "int8_static";
    case ActKey::fp8_tensor_dynamic: return "fp8_tensor_dynamic";
  }
  return "?";
}

std::string_view scheme_name(QuantKey k) {
  if (k == kNvfp4W4A4) return "nvfp4_w4a4";
  if (k == kNvfp4W4A8) return "nvfp4_w4a8_fp8";
  if (k.weight == WeightKey::nvfp4_static) return "nvfp4_w4a16";
  if (k == kFp8W8A16) return "fp8_w8a16";
  if (k == kFp8PerToken) return "fp8_per_token";
  if (k.weight == WeightKey::fp8_static) return "fp8";
  if (k == kFp8BlockW8A16) return "fp8_block_w8a16";
  if (k == kMxfp8) return "mxfp8";
  if (k.weight == WeightKey::fp8_block) return "fp8_block";
  if (k == kMxfp4W4A8) return "mxfp4_w4a8_fp8";
  if (k == kMxfp4W4A8Dynamic) return "mxfp4_w4a8_fp8_dynamic";
  if (k.weight == WeightKey::mxfp4) return "mxfp4_w4a16";
  if (k.weight == WeightKey::int4) return "int4_w4a16";
  if (k == kInt8W8A8) return "int8_w8a8";
  if (k.weight == WeightKey::int8) return "int8_w8a16";
  return "unquantized";
}

}  // namespace fp4lm::kernels
