#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "model/state/kv_cache.h"

namespace fp4lm::model {

// An FP8 KV cache's scale for one layer: the first of `names` the checkpoint holds (exporters
// disagree on where it lives). It must be one positive finite float32/bfloat16/float16 value;
// absent, the scale is 1.0 and `missing` counts it, so the load can say how many layers lack one.
float read_kv_cache_scale(const io::Checkpoint& ckpt, std::initializer_list<std::string> names, int64_t& missing);

// A quantized KV cache's (NVFP4, NVFP4_AFFINE, INT8) scale for one layer: as above, but required:
// absent, an Error naming the tensor and `format` (the format's values have no default scale).
float read_required_kv_cache_scale(const io::Checkpoint& ckpt, std::initializer_list<std::string> names,
                                   const std::string& format);

// NVFP4_AFFINE's k_bias / v_bias for one layer: the first of `names` present, float32/bfloat16/
// float16 of shape [1, kv_heads, 1, head_dim] (ModelOpt's bias over the batch and sequence axes of
// [batch, kv_heads, seq, head_dim]) or [kv_heads, head_dim], finite; returned as
// [kv_heads * head_dim] float32. Absent or of another shape: an Error naming the tensor.
std::vector<float> read_kv_cache_bias(const io::Checkpoint& ckpt, std::initializer_list<std::string> names,
                                      int64_t kv_heads, int64_t head_dim);

// A quantized KV slot of the attention module `owner` (e.g. model.layers.3.self_attn): sets
// shape.quant to `fmt` and reads its k/v scales (<owner>.k_proj.k_scale or <owner>.k_scale, the
// same for v) and, for NVFP4_AFFINE, its biases (<owner>.k_proj.k_bias or <owner>.k_bias), for
// shape.kv_heads × shape.head_dim. Errors name the missing or misshapen tensor; a head_dim the
// format cannot block is an Error naming the format.
void read_quantized_kv_slot(const io::Checkpoint& ckpt, const std::string& owner, KvQuant fmt, KvSlotShape& shape);

}  // namespace fp4lm::model
