#pragma once
// The quantized KV cache formats a checkpoint declares (ModelOpt's kv_cache_quant_algo NVFP4,
// NVFP4_AFFINE, INT8; compressed-tensors' int8 kv_cache_scheme), one K or V row of one KV head at
// a time, as docs/FORMAT.md §12 "KV cache formats" states them with their sources:
// - NVFP4: 16-element blocks along head_dim; per block an E4M3 scale
//   sf = e4m3(min(bamax / (6 · s), 448)) and E2M1 codes e2m1(x · ((1/s) / sf)) (all 0 when sf == 0),
//   read back as e2m1 · sf · s, where s is the layer's k_scale / v_scale (ModelOpt exports
//   amax / 448; TensorRT-LLM's kernels use it as the second-level scale: the rule of NVFP4
//   activations with input_scale = s, quant/nvfp4.h). Row bytes: head_dim/2 codes (element 2j
//   in the low nibble) then head_dim/16 scale bytes.
// - NVFP4_AFFINE: NVFP4 of x − b, read back as (e2m1 · sf · s) + b, with the layer's k_bias /
//   v_bias b per KV head and channel.
// - INT8: code = clamp(round-half-even(x / s), −128, 127), read back as code · s. Row bytes:
//   head_dim.
// Arithmetic in float32, in the order written.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace fp4lm::model {

enum class KvQuant : uint8_t { none, nvfp4, nvfp4_affine, int8 };

// "NVFP4", "NVFP4_AFFINE", "INT8" ("none" for none).
std::string_view kv_quant_name(KvQuant q);
// The format of a declared (upper-case) name, nullopt for any other name.
std::optional<KvQuant> kv_quant_of(std::string_view declared);
// Bytes one row of head_dim values takes in format q (not none). Error when NVFP4's head_dim is
// not a multiple of 16.
size_t kv_quant_row_bytes(KvQuant q, int64_t head_dim);
// One row x[head_dim] into dst (kv_quant_row_bytes); `scale` > 0 the per-tensor scale, `bias`
// [head_dim] for NVFP4_AFFINE (null otherwise). Error on a non-finite x.
void kv_quantize_row(KvQuant q, const float* x, int64_t head_dim, float scale, const float* bias, uint8_t* dst);
// What kv_quantize_row stored, back as float32 into dst[head_dim].
void kv_dequantize_row(KvQuant q, const uint8_t* src, int64_t head_dim, float scale, const float* bias, float* dst);

}  // namespace fp4lm::model
