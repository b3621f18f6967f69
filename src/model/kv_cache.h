#pragma once
// The key/value cache of one sequence: for every decoder layer and KV head, `capacity`
// positions of head_dim values, stored in the KV dtype: float32, bfloat16, float16, or FP8 E4M3
// with a per-layer scale for K and for V (stored code = e4m3(x / scale), read back as
// code × scale, the checkpoint's k_scale / v_scale as vLLM uses them).
// Layout [layer][k|v][kv_head][position][head_dim], so attention scans one head's history
// contiguously. The memory is an anonymous mapping reserved up front: pages become resident
// only as positions fill, and go back to the OS at once when the cache is destroyed or cleared,
// so a server can admit sequences by reserved and used bytes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace fp4lm::model {

class KvCache {
 public:
  // k_scale / v_scale: per layer, FP8 only (empty = 1.0 everywhere).
  KvCache(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, int64_t capacity, DType dtype,
          std::vector<float> k_scale = {}, std::vector<float> v_scale = {});
  ~KvCache();
  KvCache(KvCache&& o) noexcept;
  KvCache& operator=(KvCache&& o) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t capacity() const { return capacity_; }
  int64_t length() const { return length_; }  // positions filled so far
  void set_length(int64_t n);                  // Error outside [0, capacity]
  // Length 0, and the filled pages are returned to the OS (the reservation stays).
  void clear();
  DType dtype() const { return dtype_; }
  int64_t num_layers() const { return layers_; }
  int64_t num_kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  size_t bytes() const { return bytes_; }                   // reserved
  size_t bytes_per_position() const { return bytes_ / static_cast<size_t>(capacity_); }
  // Bytes of the filled positions (resident memory is this rounded up to whole pages per head).
  size_t used_bytes() const { return bytes_per_position() * static_cast<size_t>(length_); }

  // Stores k and v ([num_kv_heads * head_dim] float32 each) at (layer, pos), rounded to dtype().
  void store(int64_t layer, int64_t pos, const float* k, const float* v);
  // FP8: the scales of a layer's K and V (1.0 for the other dtypes).
  float k_scale(int64_t layer) const { return k_scale_.empty() ? 1.0f : k_scale_[layer]; }
  float v_scale(int64_t layer) const { return v_scale_.empty() ? 1.0f : v_scale_[layer]; }
  // Raw rows of one head: [capacity, head_dim] elements of dtype().
  const uint8_t* keys(int64_t layer, int64_t head) const { return at(layer, 0, head); }
  const uint8_t* values(int64_t layer, int64_t head) const { return at(layer, 1, head); }

 private:
  uint8_t* at(int64_t layer, int kv, int64_t head) const {
    const size_t plane = static_cast<size_t>(capacity_ * head_dim_) * esize_;
    return data_ + ((static_cast<size_t>(layer) * 2 + kv) * kv_heads_ + head) * plane;
  }

  int64_t layers_, kv_heads_, head_dim_, capacity_;
  DType dtype_;
  size_t esize_;
  size_t bytes_;
  int64_t length_ = 0;
  uint8_t* data_ = nullptr;  // mmap'd, bytes_ long; null after a move
  std::vector<float> k_scale_, v_scale_;
};

}  // namespace fp4lm::model
