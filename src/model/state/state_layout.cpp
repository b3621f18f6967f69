#include "model/state/state_layout.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace fp4lm::model {

int64_t StateLayout::add_kv(int64_t layer, const KvSlotShape& shape) {
  if (shape.kv_heads <= 0 || shape.head_dim <= 0 || shape.window < 0)
    fail("layer {}: invalid KV slot (kv heads {}, head_dim {}, window {})", layer, shape.kv_heads, shape.head_dim,
         shape.window);
  // A declared quantized cache runs in every slot or the load stops: a layer kind that does not
  // declare its slot in the format would otherwise run another cache than the checkpoint's.
  if (kv_quant_ != KvQuant::none && shape.quant != kv_quant_)
    fail("layer {}: the checkpoint declares a {} KV cache, which this layer's kind of attention does not store{}", layer,
         kv_quant_name(kv_quant_), shape.key_only ? " (a key-only latent slot)" : "");
  kv_.push_back(shape);
  kv_owner_.push_back(layer);
  return static_cast<int64_t>(kv_.size()) - 1;
}

int64_t StateLayout::find_kv_slot_of_layer(int64_t layer) const {
  for (size_t s = 0; s < kv_owner_.size(); ++s)
    if (kv_owner_[s] == layer) return static_cast<int64_t>(s);
  return -1;
}

bool StateLayout::expects_kv_from_earlier_stage(int64_t layer) const {
  return std::find(received_.begin(), received_.end(), layer) != received_.end();
}

int64_t StateLayout::kv_slot_of_layer(int64_t layer) const {
  if (const int64_t s = find_kv_slot_of_layer(layer); s >= 0) return s;
  fail("decoder layer {} stored no K/V (no earlier layer declared a KV slot for it) to share", layer);
}

int64_t StateLayout::add_recurrent(size_t floats, const RecurrentReplay* replay) {
  recurrent_.push_back(floats);
  replays_.push_back(replay);
  return static_cast<int64_t>(recurrent_.size()) - 1;
}

bool StateLayout::can_rewind() const {
  return std::all_of(replays_.begin(), replays_.end(), [](const RecurrentReplay* r) { return r != nullptr; });
}

void StateLayout::align_rows(int64_t rows) {
  if (rows <= 0) fail("state layout: row alignment must be positive, got {}", rows);
  align_ = std::lcm(align_, rows);
}

KvCache StateLayout::new_kv_cache(int64_t capacity, int64_t max_step_rows, DType kv_dtype) const {
  return KvCache(kv_, capacity, max_step_rows, kv_dtype);
}

size_t StateLayout::sequence_bytes(int64_t capacity, int64_t max_step_rows, DType kv_dtype) const {
  size_t b = KvCache::reserved_bytes(kv_, capacity, max_step_rows, kv_dtype);
  for (size_t f : recurrent_) b += 2 * f * sizeof(float);
  return b;
}

size_t StateLayout::replay_log_bytes(int64_t rows) const {
  size_t floats = 0;
  for (const RecurrentReplay* r : replays_)
    if (r) floats += r->log_row_floats();
  return floats * static_cast<size_t>(std::max<int64_t>(rows, 0)) * sizeof(float);
}

}  // namespace fp4lm::model
