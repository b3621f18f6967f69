#include "model/kv_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace fp4lm::model {

namespace {
std::vector<KvSlotShape> uniform_slots(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, DType dtype,
                                       const std::vector<float>& k_scale, const std::vector<float>& v_scale) {
  for (const std::vector<float>* s : {&k_scale, &v_scale}) {
    if (s->empty()) continue;
    if (dtype != DType::F8_E4M3) fail("KV cache: scales are only for an FP8 cache");
    if (static_cast<int64_t>(s->size()) != num_layers)
      fail("KV cache: {} scales for {} layers", s->size(), num_layers);
  }
  std::vector<KvSlotShape> out(static_cast<size_t>(std::max<int64_t>(num_layers, 0)));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].kv_heads = num_kv_heads;
    out[i].head_dim = head_dim;
    if (!k_scale.empty()) out[i].k_scale = k_scale[i];
    if (!v_scale.empty()) out[i].v_scale = v_scale[i];
  }
  return out;
}
}  // namespace

KvCache::KvCache(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, int64_t capacity, DType dtype,
                 std::vector<float> k_scale, std::vector<float> v_scale)
    : KvCache(uniform_slots(num_layers, num_kv_heads, head_dim, dtype, k_scale, v_scale), capacity, 1, dtype) {
  if (num_layers <= 0) fail("KV cache: invalid shape (layers {}, kv heads {}, head_dim {}, capacity {})", num_layers,
                            num_kv_heads, head_dim, capacity);
}

KvCache::KvCache(std::vector<KvSlotShape> slots, int64_t capacity, int64_t max_step_rows, DType dtype)
    : capacity_(capacity), dtype_(dtype) {
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16 && dtype != DType::F8_E4M3)
    fail("KV cache dtype must be float32, bfloat16, float16 or F8_E4M3, found {}", dtype_name(dtype));
  if (capacity <= 0 || max_step_rows <= 0)
    fail("KV cache: invalid capacity {} (max step rows {})", capacity, max_step_rows);
  esize_ = dtype_size(dtype);
  for (const KvSlotShape& s : slots) {
    for (float x : {s.k_scale, s.v_scale}) {
      if (!(x > 0) || !std::isfinite(x)) fail("KV cache: scale {} is not a positive finite number", x);
      if (x != 1.0f && dtype != DType::F8_E4M3) fail("KV cache: scales are only for an FP8 cache");
    }
    if (s.kv_heads <= 0 || s.head_dim <= 0 || s.window < 0)
      fail("KV cache: invalid shape (layers {}, kv heads {}, head_dim {}, capacity {}, window {})", slots.size(),
           s.kv_heads, s.head_dim, capacity, s.window);
    Slot slot;
    slot.shape = s;
    slot.rows = slot_rows(s, capacity, max_step_rows);
    slot.offset = bytes_;
    slot.plane = static_cast<size_t>(slot.rows * s.head_dim) * esize_;
    bytes_ += static_cast<size_t>(s.planes() * s.kv_heads) * slot.plane;
    if (slot.rows == capacity) per_position_ += static_cast<size_t>(s.planes() * s.kv_heads * s.head_dim) * esize_;
    slots_.push_back(slot);
  }
  if (bytes_ == 0) return;  // no attention layer: nothing to reserve
  // Address space only: MAP_NORESERVE so a long context does not count against overcommit
  // until it is filled.
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    fail("KV cache: cannot reserve {} bytes ({} positions): {}", bytes_, capacity, std::strerror(errno));
  data_ = static_cast<uint8_t*>(p);
}

int64_t KvCache::slot_rows(const KvSlotShape& s, int64_t capacity, int64_t max_step_rows) {
  return s.window > 0 ? std::min(capacity, s.window - 1 + max_step_rows) : capacity;
}

size_t KvCache::reserved_bytes(const std::vector<KvSlotShape>& slots, int64_t capacity, int64_t max_step_rows,
                               DType dtype) {
  size_t b = 0;
  for (const KvSlotShape& s : slots)
    b += static_cast<size_t>(s.planes() * s.kv_heads * s.head_dim * slot_rows(s, capacity, max_step_rows)) *
         dtype_size(dtype);
  return b;
}

KvCache::~KvCache() {
  if (data_) ::munmap(data_, bytes_);
}

KvCache::KvCache(KvCache&& o) noexcept
    : slots_(std::move(o.slots_)), capacity_(o.capacity_), dtype_(o.dtype_), esize_(o.esize_), bytes_(o.bytes_),
      per_position_(o.per_position_), length_(o.length_), data_(std::exchange(o.data_, nullptr)) {}

KvCache& KvCache::operator=(KvCache&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, bytes_);
    slots_ = std::move(o.slots_);
    capacity_ = o.capacity_;
    dtype_ = o.dtype_;
    esize_ = o.esize_;
    bytes_ = o.bytes_;
    per_position_ = o.per_position_;
    length_ = o.length_;
    data_ = std::exchange(o.data_, nullptr);
  }
  return *this;
}

size_t KvCache::used_bytes() const {
  size_t b = 0;
  for (const Slot& s : slots_)
    b += static_cast<size_t>(s.shape.planes() * s.shape.kv_heads * s.shape.head_dim * std::min(length_, s.rows)) *
         esize_;
  return b;
}

void KvCache::set_length(int64_t n) {
  if (n < 0 || n > capacity_) fail("KV cache: length {} outside [0, {}]", n, capacity_);
  length_ = n;
}

bool KvCache::can_rewind_to(int64_t n) const {
  for (const Slot& s : slots_)
    if (s.rows < capacity_ && length_ - n > s.rows - (s.shape.window - 1)) return false;
  return true;
}

void KvCache::clear() {
  length_ = 0;
  // Private anonymous pages read back as zeros after this; nothing reads past length() anyway.
  if (data_) ::madvise(data_, bytes_, MADV_DONTNEED);
}

void KvCache::store(int64_t layer, int64_t pos, const float* k, const float* v) {
  if (layer < 0 || layer >= num_layers() || pos < 0 || pos >= capacity_)
    fail("KV cache: (layer {}, position {}) outside ({} layers, {} positions)", layer, pos, num_layers(), capacity_);
  const int64_t kv_heads = num_kv_heads(layer), hd = head_dim(layer);
  const size_t row = static_cast<size_t>(hd), r = static_cast<size_t>(row_of(layer, pos));
  const bool values = !slots_[layer].shape.key_only;
  if (dtype_ == DType::F8_E4M3) {
    const float ks = k_scale(layer), vs = v_scale(layer);
    for (int64_t h = 0; h < kv_heads; ++h) {
      uint8_t* kd = at(layer, 0, h) + r * row;
      for (size_t i = 0; i < row; ++i) kd[i] = f32_to_e4m3(k[h * hd + static_cast<int64_t>(i)] / ks);
      if (!values) continue;
      uint8_t* vd = at(layer, 1, h) + r * row;
      for (size_t i = 0; i < row; ++i) vd[i] = f32_to_e4m3(v[h * hd + static_cast<int64_t>(i)] / vs);
    }
    return;
  }
  for (int64_t h = 0; h < kv_heads; ++h) {
    from_f32_n(k + h * hd, dtype_, at(layer, 0, h) + r * row * esize_, row);
    if (values) from_f32_n(v + h * hd, dtype_, at(layer, 1, h) + r * row * esize_, row);
  }
}

size_t KvCache::block_bytes(int64_t n) const {
  size_t b = 0;
  for (const Slot& s : slots_) b += static_cast<size_t>(s.shape.planes() * s.shape.kv_heads * s.shape.head_dim * n) * esize_;
  return b;
}

size_t KvCache::slot_block_bytes(int64_t layer, int64_t n) const {
  const KvSlotShape& s = slots_.at(static_cast<size_t>(layer)).shape;
  return static_cast<size_t>(s.planes() * s.kv_heads * s.head_dim * n) * esize_;
}

void KvCache::save_slot_rows(int64_t layer, int64_t pos0, int64_t n, uint8_t* dst) const {
  if (layer < 0 || layer >= num_layers() || pos0 < 0 || n < 0 || pos0 + n > capacity_)
    fail("KV cache: no positions [{}, {}) of slot {} to copy ({} slots of {} positions)", pos0, pos0 + n, layer,
         num_layers(), capacity_);
  const Slot& s = slots_[static_cast<size_t>(layer)];
  const size_t row = static_cast<size_t>(s.shape.head_dim) * esize_;
  for (int kv = 0; kv < static_cast<int>(s.shape.planes()); ++kv)
    for (int64_t h = 0; h < s.shape.kv_heads; ++h) {
      const uint8_t* src = at(layer, kv, h);
      for (int64_t p = pos0; p < pos0 + n; ++p, dst += row) std::memcpy(dst, src + static_cast<size_t>(row_of(layer, p)) * row, row);
    }
}

void KvCache::load_slot_rows(int64_t layer, int64_t pos0, int64_t n, const uint8_t* src) {
  if (layer < 0 || layer >= num_layers() || pos0 < 0 || n < 0 || pos0 + n > capacity_)
    fail("KV cache: no positions [{}, {}) of slot {} to fill ({} slots of {} positions)", pos0, pos0 + n, layer,
         num_layers(), capacity_);
  const Slot& s = slots_[static_cast<size_t>(layer)];
  const size_t row = static_cast<size_t>(s.shape.head_dim) * esize_;
  for (int kv = 0; kv < static_cast<int>(s.shape.planes()); ++kv)
    for (int64_t h = 0; h < s.shape.kv_heads; ++h) {
      uint8_t* dst = at(layer, kv, h);
      for (int64_t p = pos0; p < pos0 + n; ++p, src += row) std::memcpy(dst + static_cast<size_t>(row_of(layer, p)) * row, src, row);
    }
}

bool KvCache::holds(int64_t pos) const {
  if (pos < 0 || pos >= length_) return false;
  for (const Slot& s : slots_)
    if (s.rows < capacity_ && pos < length_ - s.rows) return false;
  return true;
}

void KvCache::save_rows(int64_t pos0, int64_t n, uint8_t* dst) const {
  if (n <= 0 || !holds(pos0) || !holds(pos0 + n - 1))
    fail("KV cache: positions [{}, {}) are not all held (length {})", pos0, pos0 + n, length_);
  for (size_t l = 0; l < slots_.size(); ++l) {
    const Slot& s = slots_[l];
    const size_t row = static_cast<size_t>(s.shape.head_dim) * esize_;
    for (int kv = 0; kv < static_cast<int>(s.shape.planes()); ++kv)
      for (int64_t h = 0; h < s.shape.kv_heads; ++h) {
        const uint8_t* src = at(static_cast<int64_t>(l), kv, h);
        if (s.rows == capacity_) {  // full attention: the rows are contiguous
          std::memcpy(dst, src + static_cast<size_t>(pos0) * row, static_cast<size_t>(n) * row);
          dst += static_cast<size_t>(n) * row;
          continue;
        }
        for (int64_t p = pos0; p < pos0 + n; ++p, dst += row)
          std::memcpy(dst, src + static_cast<size_t>(p % s.rows) * row, row);
      }
  }
}

void KvCache::load_rows(int64_t pos0, int64_t n, const uint8_t* src, int64_t final_length) {
  if (pos0 < 0 || n <= 0 || pos0 + n > capacity_ || final_length > capacity_)
    fail("KV cache: cannot load positions [{}, {}) into {} positions", pos0, pos0 + n, capacity_);
  for (size_t l = 0; l < slots_.size(); ++l) {
    const Slot& s = slots_[l];
    const size_t row = static_cast<size_t>(s.shape.head_dim) * esize_;
    for (int kv = 0; kv < static_cast<int>(s.shape.planes()); ++kv)
      for (int64_t h = 0; h < s.shape.kv_heads; ++h) {
        uint8_t* dst = at(static_cast<int64_t>(l), kv, h);
        if (s.rows == capacity_) {
          std::memcpy(dst + static_cast<size_t>(pos0) * row, src, static_cast<size_t>(n) * row);
          src += static_cast<size_t>(n) * row;
          continue;
        }
        for (int64_t p = pos0; p < pos0 + n; ++p, src += row)
          if (p >= final_length - s.rows) std::memcpy(dst + static_cast<size_t>(p % s.rows) * row, src, row);
      }
  }
}

}  // namespace fp4lm::model
