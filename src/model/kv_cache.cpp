#include "model/kv_cache.h"

#include "core/error.h"

namespace fp4lm::model {

KvCache::KvCache(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, int64_t capacity, DType dtype)
    : layers_(num_layers), kv_heads_(num_kv_heads), head_dim_(head_dim), capacity_(capacity), dtype_(dtype) {
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16)
    fail("KV cache dtype must be float32, bfloat16 or float16, found {}", dtype_name(dtype));
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0 || capacity <= 0)
    fail("KV cache: invalid shape (layers {}, kv heads {}, head_dim {}, capacity {})", num_layers,
         num_kv_heads, head_dim, capacity);
  esize_ = dtype_size(dtype);
  bytes_ = static_cast<size_t>(num_layers) * 2 * num_kv_heads * capacity * head_dim * esize_;
  // Default-initialized (not zeroed): large allocations come straight from mmap and stay
  // non-resident until written.
  data_.reset(new uint8_t[bytes_]);
}

void KvCache::set_length(int64_t n) {
  if (n < 0 || n > capacity_) fail("KV cache: length {} outside [0, {}]", n, capacity_);
  length_ = n;
}

void KvCache::store(int64_t layer, int64_t pos, const float* k, const float* v) {
  if (layer < 0 || layer >= layers_ || pos < 0 || pos >= capacity_)
    fail("KV cache: (layer {}, position {}) outside ({} layers, {} positions)", layer, pos, layers_, capacity_);
  const size_t row = static_cast<size_t>(head_dim_);
  for (int64_t h = 0; h < kv_heads_; ++h) {
    from_f32_n(k + h * head_dim_, dtype_, at(layer, 0, h) + pos * row * esize_, row);
    from_f32_n(v + h * head_dim_, dtype_, at(layer, 1, h) + pos * row * esize_, row);
  }
}

}  // namespace fp4lm::model
