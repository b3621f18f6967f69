#include "model/kv_cache_scale.h"

#include <cmath>

#include "core/error.h"

namespace fp4lm::model {

float read_kv_cache_scale(const io::Checkpoint& ckpt, std::initializer_list<std::string> names, int64_t& missing) {
  for (const std::string& n : names) {
    const TensorView* t = ckpt.find(n);
    if (!t) continue;
    if (t->numel() != 1 || (t->dtype != DType::F32 && t->dtype != DType::BF16 && t->dtype != DType::F16))
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

}  // namespace fp4lm::model
