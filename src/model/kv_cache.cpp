#include "model/kv_cache.h"

#include <sys/mman.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace fp4lm::model {

KvCache::KvCache(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, int64_t capacity, DType dtype,
                 std::vector<float> k_scale, std::vector<float> v_scale)
    : layers_(num_layers), kv_heads_(num_kv_heads), head_dim_(head_dim), capacity_(capacity), dtype_(dtype),
      k_scale_(std::move(k_scale)), v_scale_(std::move(v_scale)) {
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16 && dtype != DType::F8_E4M3)
    fail("KV cache dtype must be float32, bfloat16, float16 or F8_E4M3, found {}", dtype_name(dtype));
  for (const std::vector<float>* s : {&k_scale_, &v_scale_}) {
    if (s->empty()) continue;
    if (dtype != DType::F8_E4M3) fail("KV cache: scales are only for an FP8 cache");
    if (static_cast<int64_t>(s->size()) != num_layers)
      fail("KV cache: {} scales for {} layers", s->size(), num_layers);
    for (float x : *s)
      if (!(x > 0) || !std::isfinite(x)) fail("KV cache: scale {} is not a positive finite number", x);
  }
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0 || capacity <= 0)
    fail("KV cache: invalid shape (layers {}, kv heads {}, head_dim {}, capacity {})", num_layers,
         num_kv_heads, head_dim, capacity);
  esize_ = dtype_size(dtype);
  bytes_ = static_cast<size_t>(num_layers) * 2 * num_kv_heads * capacity * head_dim * esize_;
  // Address space only: MAP_NORESERVE so a long context does not count against overcommit
  // until it is filled.
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    fail("KV cache: cannot reserve {} bytes ({} positions): {}", bytes_, capacity, std::strerror(errno));
  data_ = static_cast<uint8_t*>(p);
}

KvCache::~KvCache() {
  if (data_) ::munmap(data_, bytes_);
}

KvCache::KvCache(KvCache&& o) noexcept
    : layers_(o.layers_), kv_heads_(o.kv_heads_), head_dim_(o.head_dim_), capacity_(o.capacity_),
      dtype_(o.dtype_), esize_(o.esize_), bytes_(o.bytes_), length_(o.length_),
      data_(std::exchange(o.data_, nullptr)), k_scale_(std::move(o.k_scale_)), v_scale_(std::move(o.v_scale_)) {}

KvCache& KvCache::operator=(KvCache&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, bytes_);
    layers_ = o.layers_;
    kv_heads_ = o.kv_heads_;
    head_dim_ = o.head_dim_;
    capacity_ = o.capacity_;
    dtype_ = o.dtype_;
    esize_ = o.esize_;
    bytes_ = o.bytes_;
    length_ = o.length_;
    data_ = std::exchange(o.data_, nullptr);
    k_scale_ = std::move(o.k_scale_);
    v_scale_ = std::move(o.v_scale_);
  }
  return *this;
}

void KvCache::set_length(int64_t n) {
  if (n < 0 || n > capacity_) fail("KV cache: length {} outside [0, {}]", n, capacity_);
  length_ = n;
}

void KvCache::clear() {
  length_ = 0;
  // Private anonymous pages read back as zeros after this; nothing reads past length() anyway.
  if (data_) ::madvise(data_, bytes_, MADV_DONTNEED);
}

void KvCache::store(int64_t layer, int64_t pos, const float* k, const float* v) {
  if (layer < 0 || layer >= layers_ || pos < 0 || pos >= capacity_)
    fail("KV cache: (layer {}, position {}) outside ({} layers, {} positions)", layer, pos, layers_, capacity_);
  const size_t row = static_cast<size_t>(head_dim_);
  if (dtype_ == DType::F8_E4M3) {
    const float ks = k_scale(layer), vs = v_scale(layer);
    for (int64_t h = 0; h < kv_heads_; ++h) {
      uint8_t* kd = at(layer, 0, h) + pos * row;
      uint8_t* vd = at(layer, 1, h) + pos * row;
      for (size_t i = 0; i < row; ++i) {
        kd[i] = f32_to_e4m3(k[h * head_dim_ + static_cast<int64_t>(i)] / ks);
        vd[i] = f32_to_e4m3(v[h * head_dim_ + static_cast<int64_t>(i)] / vs);
      }
    }
    return;
  }
  for (int64_t h = 0; h < kv_heads_; ++h) {
    from_f32_n(k + h * head_dim_, dtype_, at(layer, 0, h) + pos * row * esize_, row);
    from_f32_n(v + h * head_dim_, dtype_, at(layer, 1, h) + pos * row * esize_, row);
  }
}

}  // namespace fp4lm::model
