#include "model/state/state_bytes.h"

namespace fp4lm::model {

size_t state_bytes_per_position(const StateLayout& layout, DType kv_dtype) {
  size_t b = 0;
  for (const KvSlotShape& s : layout.kv_slots())
    if (s.window == 0) {  // a strided slot (compressed history): its row per stride positions, rounded up
      const size_t st = static_cast<size_t>(s.stride);
      b += (static_cast<size_t>(s.planes() * s.kv_heads) * KvCache::row_bytes(s, kv_dtype) + st - 1) / st;
    }
  return b;
}

size_t state_fixed_bytes(const StateLayout& layout, int64_t max_step_rows, DType kv_dtype) {
  size_t b = 0;
  for (const KvSlotShape& s : layout.kv_slots())
    if (s.window > 0)
      b += static_cast<size_t>(s.planes() * s.kv_heads * (s.window - 1 + max_step_rows)) *
           KvCache::row_bytes(s, kv_dtype);
  for (size_t f : layout.recurrent_slots()) b += 2 * f * sizeof(float);
  return b;
}

}  // namespace fp4lm::model
