#include "model/state/kv_cache.h"

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
  for (KvSlotShape& s : slots) {
    for (float x : {s.k_scale, s.v_scale}) {
      if (!(x > 0) || !std::isfinite(x)) fail("KV cache: scale {} is not a positive finite number", x);
      if (x != 1.0f && dtype != DType::F8_E4M3 && s.quant == KvQuant::none)
        fail("KV cache: scales are only for an FP8 or quantized cache");
    }
    if (s.kv_heads <= 0 || s.head_dim <= 0 || s.window < 0 || s.stride < 1 || (s.stride > 1 && s.window > 0))
      fail("KV cache: invalid shape (layers {}, kv heads {}, head_dim {}, capacity {}, window {}, stride {})",
           slots.size(), s.kv_heads, s.head_dim, capacity, s.window, s.stride);
    if (s.quant != KvQuant::none && s.key_only)
      fail("KV cache: the {} format has no key-only (latent) slot", kv_quant_name(s.quant));
    const size_t nbias = s.quant == KvQuant::nvfp4_affine ? static_cast<size_t>(s.kv_heads * s.head_dim) : 0;
    if (s.k_bias.size() != nbias || s.v_bias.size() != nbias)
      fail("KV cache: a {} slot takes {} k/v bias values, found {} and {}", kv_quant_name(s.quant), nbias,
           s.k_bias.size(), s.v_bias.size());
    Slot slot;
    slot.shape = std::move(s);
    slot.rows = slot_rows(slot.shape, capacity, max_step_rows);
    slot.offset = bytes_;
    slot.row = row_bytes(slot.shape, dtype);
    slot.plane = static_cast<size_t>(slot.rows) * slot.row;
    bytes_ += static_cast<size_t>(slot.shape.planes() * slot.shape.kv_heads) * slot.plane;
    if (slot.shape.window == 0) {
      const size_t st = static_cast<size_t>(slot.shape.stride);
      per_position_ += (static_cast<size_t>(slot.shape.planes() * slot.shape.kv_heads) * slot.row + st - 1) / st;
    }
    slots_.push_back(std::move(slot));
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
  if (s.window > 0) return std::min(capacity, s.window - 1 + max_step_rows);
  return (capacity + s.stride - 1) / s.stride;
}

namespace {
// A strided slot's rows that positions [pos0, pos0 + n) complete, and the rows a block of n
// positions reserves for them (prefix caching pads to it).
int64_t first_row(const KvSlotShape& s, int64_t pos0) { return pos0 / s.stride; }
int64_t end_row(const KvSlotShape& s, int64_t pos0, int64_t n) { return (pos0 + n) / s.stride; }
int64_t block_rows(const KvSlotShape& s, int64_t n) { return s.window > 0 ? n : (n + s.stride - 1) / s.stride; }
}  // namespace

size_t KvCache::reserved_bytes(const std::vector<KvSlotShape>& slots, int64_t capacity, int64_t max_step_rows,
                               DType dtype) {
  size_t b = 0;
  for (const KvSlotShape& s : slots)
    b += static_cast<size_t>(s.planes() * s.kv_heads * slot_rows(s, capacity, max_step_rows)) * row_bytes(s, dtype);
  return b;
}

size_t KvCache::row_bytes(const KvSlotShape& s, DType dtype) {
  return s.quant == KvQuant::none ? static_cast<size_t>(s.head_dim) * dtype_size(dtype)
                                  : kv_quant_row_bytes(s.quant, s.head_dim);
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
    b += static_cast<size_t>(s.shape.planes() * s.shape.kv_heads * std::min(length_ / s.shape.stride, s.rows)) * s.row;
  return b;
}

void KvCache::set_length(int64_t n) {
  if (n < 0 || n > capacity_) fail("KV cache: length {} outside [0, {}]", n, capacity_);
  length_ = n;
}

bool KvCache::can_rewind_to(int64_t n) const {
  for (const Slot& s : slots_)
    if (s.shape.window > 0 && s.rows < capacity_ && length_ - n > s.rows - (s.shape.window - 1)) return false;
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
  const KvSlotShape& shape = slots_[layer].shape;
  const bool values = !shape.key_only;
  if (shape.quant != KvQuant::none) {
    const size_t rb = slots_[layer].row;
    const bool affine = shape.quant == KvQuant::nvfp4_affine;
    for (int64_t h = 0; h < kv_heads; ++h) {
      kv_quantize_row(shape.quant, k + h * hd, hd, shape.k_scale, affine ? shape.k_bias.data() + h * hd : nullptr,
                      at(layer, 0, h) + r * rb);
      kv_quantize_row(shape.quant, v + h * hd, hd, shape.v_scale, affine ? shape.v_bias.data() + h * hd : nullptr,
                      at(layer, 1, h) + r * rb);
    }
    return;
  }
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

void KvCache::dequantize(int64_t layer, int kv, int64_t head, int64_t row0, int64_t n, float* dst) const {
  const Slot& s = slots_.at(static_cast<size_t>(layer));
  if (s.shape.quant == KvQuant::none) fail("KV cache: slot {} is not quantized", layer);
  if (row0 < 0 || n < 0 || row0 + n > s.rows || head < 0 || head >= s.shape.kv_heads || kv < 0 || kv > 1)
    fail("KV cache: no rows [{}, {}) of head {} in slot {} ({} rows)", row0, row0 + n, head, layer, s.rows);
  const int64_t hd = s.shape.head_dim;
  const std::vector<float>& bias = kv == 0 ? s.shape.k_bias : s.shape.v_bias;
  const float scale = kv == 0 ? s.shape.k_scale : s.shape.v_scale;
  const uint8_t* src = at(layer, kv, head) + static_cast<size_t>(row0) * s.row;
  for (int64_t r = 0; r < n; ++r)
    kv_dequantize_row(s.shape.quant, src + static_cast<size_t>(r) * s.row, hd, scale,
                      bias.empty() ? nullptr : bias.data() + head * hd, dst + r * hd);
}

void KvCache::read_f32(int64_t layer, int kv, int64_t head, int64_t row0, int64_t n, float* dst) const {
  const Slot& s = slots_.at(static_cast<size_t>(layer));
  if (s.shape.quant != KvQuant::none) return dequantize(layer, kv, head, row0, n, dst);
  if (row0 < 0 || n < 0 || row0 + n > s.rows || head < 0 || head >= s.shape.kv_heads || kv < 0 ||
      kv >= s.shape.planes())
    fail("KV cache: no rows [{}, {}) of head {} plane {} in slot {} ({} rows)", row0, row0 + n, head, kv, layer,
         s.rows);
  const size_t count = static_cast<size_t>(n * s.shape.head_dim);
  const uint8_t* src = at(layer, kv, head) + static_cast<size_t>(row0) * s.row;
  if (dtype_ == DType::F8_E4M3) {
    const float scale = kv == 0 ? s.shape.k_scale : s.shape.v_scale;
    for (size_t i = 0; i < count; ++i) dst[i] = e4m3_to_f32(src[i]) * scale;
  } else {
    to_f32_n(src, dtype_, dst, count);
  }
}

size_t KvCache::block_bytes(int64_t n) const {
  size_t b = 0;
  for (const Slot& s : slots_) b += static_cast<size_t>(s.shape.planes() * s.shape.kv_heads * block_rows(s.shape, n)) * s.row;
  return b;
}

size_t KvCache::slot_block_bytes(int64_t layer, int64_t n) const {
  const Slot& s = slots_.at(static_cast<size_t>(layer));
  if (s.shape.stride > 1) fail("KV cache: slot {} is strided (a compressed history); its rows are not sent", layer);
  return static_cast<size_t>(s.shape.planes() * s.shape.kv_heads * n) * s.row;
}

void KvCache::save_slot_rows(int64_t layer, int64_t pos0, int64_t n, uint8_t* dst) const {
  if (layer < 0 || layer >= num_layers() || pos0 < 0 || n < 0 || pos0 + n > capacity_)
    fail("KV cache: no positions [{}, {}) of slot {} to copy ({} slots of {} positions)", pos0, pos0 + n, layer,
         num_layers(), capacity_);
  const Slot& s = slots_[static_cast<size_t>(layer)];
  const size_t row = s.row;
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
  const size_t row = s.row;
  for (int kv = 0; kv < static_cast<int>(s.shape.planes()); ++kv)
    for (int64_t h = 0; h < s.shape.kv_heads; ++h) {
      uint8_t* dst = at(layer, kv, h);
      for (int64_t p = pos0; p < pos0 + n; ++p, src += row) std::memcpy(dst + static_cast<size_t>(row_of(layer, p)) * row, src, row);
    }
}

bool KvCache::holds(int64_t pos) const {
  if (pos < 0 || pos >= length_) return false;
  for (const Slot& s : slots_)
    if (s.shape.window > 0 && s.rows < capacity_ && pos < length_ - s.rows) return false;
  return true;
}

void KvCache::save_rows(int64_t pos0, int64_t n, uint8_t* dst) const {
  if (n <= 0 || !holds(pos0) || !holds(pos0 + n - 1))
    fail("KV cache: positions [{}, {}) are not all held (length {})", pos0, pos0 + n, length_);
  for (size_t l = 0; l < slots_.size(); ++l) {
    const Slot& s = slots_[l];
    const size_t row = s.row;
    for (int kv = 0; kv < static_cast<int>(s.shape.planes()); ++kv)
      for (int64_t h = 0; h < s.shape.kv_heads; ++h) {
        const uint8_t* src = at(static_cast<int64_t>(l), kv, h);
        if (s.shape.stride > 1) {  // the rows these positions complete, then padding
          const int64_t r0 = first_row(s.shape, pos0), r1 = end_row(s.shape, pos0, n);
          std::memcpy(dst, src + static_cast<size_t>(r0) * row, static_cast<size_t>(r1 - r0) * row);
          std::memset(dst + static_cast<size_t>(r1 - r0) * row, 0, static_cast<size_t>(block_rows(s.shape, n) - (r1 - r0)) * row);
          dst += static_cast<size_t>(block_rows(s.shape, n)) * row;
          continue;
        }
        if (s.shape.window == 0) {  // full attention: the rows are contiguous
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
    const size_t row = s.row;
    for (int kv = 0; kv < static_cast<int>(s.shape.planes()); ++kv)
      for (int64_t h = 0; h < s.shape.kv_heads; ++h) {
        uint8_t* dst = at(static_cast<int64_t>(l), kv, h);
        if (s.shape.stride > 1) {
          const int64_t r0 = first_row(s.shape, pos0), r1 = end_row(s.shape, pos0, n);
          std::memcpy(dst + static_cast<size_t>(r0) * row, src, static_cast<size_t>(r1 - r0) * row);
          src += static_cast<size_t>(block_rows(s.shape, n)) * row;
          continue;
        }
        if (s.shape.window == 0) {
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
