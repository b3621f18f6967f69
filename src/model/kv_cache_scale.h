#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "io/checkpoint.h"

namespace fp4lm::model {

// An FP8 KV cache's scale for one layer: the first of `names` the checkpoint holds (exporters
// disagree on where it lives). It must be one positive finite float32/bfloat16/float16 value;
// absent, the scale is 1.0 and `missing` counts it, so the load can say how many layers lack one.
float read_kv_cache_scale(const io::Checkpoint& ckpt, std::initializer_list<std::string> names, int64_t& missing);

}  // namespace fp4lm::model
