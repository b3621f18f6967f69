#include "model/state/kv_cache_scale.h"

#include <cmath>

#include "core/error.h"

namespace fp4lm::model {

namespace {
bool float_dtype(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

std::string either(std::initializer_list<std::string> names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "'" : " or '") + n + "'";
  return s;
}
}  // namespace

float read_kv_cache_scale(const io::Checkpoint& ckpt, std::initializer_list<std::string> names, int64_t& missing) {
  for (const std::string& n : names) {
    const TensorView* t = ckpt.find(n);
    if (!t) continue;
    if (t->numel() != 1 || !float_dtype(t->dtype))
      fail("{}: tensor '{}' must be one float32/bfloat16/float16 value, found {} {}", ckpt.dir(), n,
           dtype_name(t->dtype), shape_str(t->shape));
    ckpt.mark_used(n);
    float v = 0;
    to_f32_n(t->data, t->dtype, &v, 1);
    if (!(v > 0) || !std::isfinite(v)) fail("{}: tensor '{}' = {} is not a positive finite scale", ckpt.dir(), n, v);
    return v;
  }
  ++missing;
  return 1.0f;
}

float read_required_kv_cache_scale(const io::Checkpoint& ckpt, std::initializer_list<std::string> names,
                                   const std::string& format) {
  int64_t missing = 0;
  const float v = read_kv_cache_scale(ckpt, names, missing);
  if (missing > 0)
    fail("{}: the {} KV cache needs the scale tensor {}, which the checkpoint does not hold", ckpt.dir(), format,
         either(names));
  return v;
}

std::vector<float> read_kv_cache_bias(const io::Checkpoint& ckpt, std::initializer_list<std::string> names,
                                      int64_t kv_heads, int64_t head_dim) {
  for (const std::string& n : names) {
    const TensorView* t = ckpt.find(n);
    if (!t) continue;
    const Shape four{1, kv_heads, 1, head_dim}, two{kv_heads, head_dim};
    if (!float_dtype(t->dtype) || (t->shape != four && t->shape != two))
      fail("{}: tensor '{}' must be float32/bfloat16/float16 of shape {} or {} (kv heads × head_dim), found {} {}",
           ckpt.dir(), n, shape_str(four), shape_str(two), dtype_name(t->dtype), shape_str(t->shape));
    ckpt.mark_used(n);
    std::vector<float> b(static_cast<size_t>(kv_heads * head_dim));
    to_f32_n(t->data, t->dtype, b.data(), b.size());
    for (size_t i = 0; i < b.size(); ++i)
      if (!std::isfinite(b[i])) fail("{}: tensor '{}' element {} is {}", ckpt.dir(), n, i, b[i]);
    return b;
  }
  fail("{}: the NVFP4_AFFINE KV cache needs the bias tensor {}, which the checkpoint does not hold", ckpt.dir(),
       either(names));
}

void read_quantized_kv_slot(const io::Checkpoint& ckpt, const std::string& owner, KvQuant fmt, KvSlotShape& shape) {
  const std::string name(kv_quant_name(fmt));
  kv_quant_row_bytes(fmt, shape.head_dim);
  shape.quant = fmt;
  shape.k_scale = read_required_kv_cache_scale(ckpt, {owner + ".k_proj.k_scale", owner + ".k_scale"}, name);
  shape.v_scale = read_required_kv_cache_scale(ckpt, {owner + ".v_proj.v_scale", owner + ".v_scale"}, name);
  if (fmt != KvQuant::nvfp4_affine) return;
  shape.k_bias = read_kv_cache_bias(ckpt, {owner + ".k_proj.k_bias", owner + ".k_bias"}, shape.kv_heads, shape.head_dim);
  shape.v_bias = read_kv_cache_bias(ckpt, {owner + ".v_proj.v_bias", owner + ".v_bias"}, shape.kv_heads, shape.head_dim);
}

}  // namespace fp4lm::model
