#pragma once
// The key/value cache of one sequence: for every attention layer that stores K/V (a "KV slot")
// and KV head, rows of head_dim values, stored in the KV dtype: float32, bfloat16, float16, or
// FP8 E4M3 with a per-slot scale for K and for V (stored code = e4m3(x / scale), read back as
// code × scale, the checkpoint's k_scale / v_scale as vLLM uses them); or, per slot, one of the
// quantized row formats of model/state/kv_quant.h (NVFP4, NVFP4_AFFINE, INT8: a row of head_dim values
// in kv_quant_row_bytes bytes, quantized by store() and read back through dequantize()).
// Slots may differ in KV heads and head_dim. A slot of a full-attention layer holds `capacity`
// rows (position p in row p); a sliding-window slot (window W) holds only
// min(capacity, W - 1 + max_step_rows) rows, a ring: position p in row p mod rows. W - 1 rows of
// history plus the rows one forward step writes before it attends, so a sequence's memory on
// such a layer is bounded by its window whatever its length. A strided slot (stride S > 1, no
// window) holds one row per S positions, ceil(capacity / S) rows: a compressed history
// (DeepSeek-V4's entries, one per S positions), row p / S written when position p completes it.
// Layout per slot [k|v][kv_head][row][head_dim], so attention scans one head's history
// contiguously. The memory is an anonymous mapping reserved up front: pages become resident
// only as rows fill, and go back to the OS at once when the cache is destroyed or cleared, so a
// server can admit sequences by reserved and used bytes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "model/state/kv_quant.h"

namespace fp4lm::model {

// One KV slot's shape, as the attention layer that owns it declares it (model/state/state_layout.h).
struct KvSlotShape {
  int64_t kv_heads = 0, head_dim = 0;
  int64_t window = 0;  // sliding window in positions (the query's own included); 0 = all positions
  float k_scale = 1.0f, v_scale = 1.0f;  // FP8 or a quantized format (1.0 for the other dtypes)
  // A quantized row format (model/state/kv_quant.h); the cache's dtype then does not apply to the slot.
  KvQuant quant = KvQuant::none;
  std::vector<float> k_bias = {}, v_bias = {};  // NVFP4_AFFINE: [kv_heads * head_dim] each; else empty
  // One plane of keys only, no values: MLA's latent (kv_lora_rank + qk_rope_head_dim values per
  // position, one "head"), which stands for both K and V.
  bool key_only = false;
  // Positions per row: 1, or a compressed history's rate (row r holds the entry of positions
  // [r·stride, (r + 1)·stride), complete once position (r + 1)·stride - 1 is filled). No window.
  int64_t stride = 1;
  int64_t planes() const { return key_only ? 1 : 2; }
};

class KvCache {
 public:
  // Slots of any shape; `max_step_rows`: the most rows of this sequence one forward step writes
  // (a sliding-window slot keeps window - 1 + max_step_rows rows).
  KvCache(std::vector<KvSlotShape> slots, int64_t capacity, int64_t max_step_rows, DType dtype);
  // num_layers full-attention slots of one shape. k_scale / v_scale: per layer, FP8 only
  // (empty = 1.0 everywhere).
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
  // Whether length n can be restored: every ring still holds the window - 1 positions before n.
  bool can_rewind_to(int64_t n) const;
  // Length 0, and the filled pages are returned to the OS (the reservation stays).
  void clear();
  DType dtype() const { return dtype_; }
  int64_t num_layers() const { return static_cast<int64_t>(slots_.size()); }
  int64_t num_kv_heads(int64_t layer = 0) const { return slots_[layer].shape.kv_heads; }
  int64_t head_dim(int64_t layer = 0) const { return slots_[layer].shape.head_dim; }
  int64_t window(int64_t layer) const { return slots_[layer].shape.window; }
  // Rows a slot holds: capacity(), or a sliding-window slot's ring.
  int64_t rows(int64_t layer) const { return slots_[layer].rows; }
  // The row position `pos` is stored in.
  int64_t row_of(int64_t layer, int64_t pos) const {
    return slots_[layer].shape.window > 0 ? pos % slots_[layer].rows : pos / slots_[layer].shape.stride;
  }
  size_t bytes() const { return bytes_; }  // reserved
  // Rows a slot of this shape holds, and the bytes a cache of these slots reserves.
  static int64_t slot_rows(const KvSlotShape& s, int64_t capacity, int64_t max_step_rows);
  static size_t reserved_bytes(const std::vector<KvSlotShape>& slots, int64_t capacity, int64_t max_step_rows,
                               DType dtype);
  // Bytes one K or V row of one KV head of this slot takes: head_dim × the dtype's size, or the
  // slot's quantized format's row bytes.
  static size_t row_bytes(const KvSlotShape& s, DType dtype);
  // Bytes one more position adds: the full-attention slots' rows (a window's ring is fixed; a
  // strided slot's row / stride, rounded up).
  size_t bytes_per_position() const { return per_position_; }
  // Bytes of the filled rows (resident memory is this rounded up to whole pages per head).
  size_t used_bytes() const;

  // Stores k and v ([num_kv_heads * head_dim] float32 each) at (layer, pos), rounded to dtype()
  // (a key_only slot: k alone; v is not read).
  void store(int64_t layer, int64_t pos, const float* k, const float* v);
  // FP8 or a quantized format: the scales of a slot's K and V (1.0 for the other dtypes).
  float k_scale(int64_t layer) const { return slots_[layer].shape.k_scale; }
  float v_scale(int64_t layer) const { return slots_[layer].shape.v_scale; }
  // The slot's quantized row format (none: rows of dtype()).
  KvQuant quant(int64_t layer) const { return slots_[layer].shape.quant; }
  // A quantized slot: rows [row0, row0 + n) of KV head `head`'s keys (kv 0) or values (kv 1),
  // dequantized into dst [n, head_dim] float32 (rows as stored: row_of(pos) for a position).
  void dequantize(int64_t layer, int kv, int64_t head, int64_t row0, int64_t n, float* dst) const;
  // Any slot: rows [row0, row0 + n) of KV head `head`'s keys (kv 0) or values (kv 1) as float32,
  // as stored (a quantized format dequantized, FP8 × its scale, 16/32-bit widened), into dst
  // [n, head_dim]. The one reader for layers that score or gather cached rows themselves.
  void read_f32(int64_t layer, int kv, int64_t head, int64_t row0, int64_t n, float* dst) const;
  // Prefix caching (engine/prefix_cache.h) copies positions out of one sequence's cache and into
  // another's, byte for byte, every slot: per slot, K then V, per KV head, n rows of head_dim (a
  // strided slot: the rows that positions [pos0, pos0 + n) complete, padded to ceil(n / stride)).
  // Bytes that n positions take in that form.
  size_t block_bytes(int64_t n) const;
  // Whether every slot still holds position pos (a ring keeps only its last rows(layer)
  // positions before length()).
  bool holds(int64_t pos) const;
  // Copies positions [pos0, pos0 + n) (all below length() and held) into dst (block_bytes(n)).
  void save_rows(int64_t pos0, int64_t n, uint8_t* dst) const;
  // Writes positions [pos0, pos0 + n) from src (what save_rows wrote, same shapes and dtype).
  // Ring rows that position `final_length` - 1 would have overwritten are skipped. The length
  // is not changed (set_length after the last block).
  void load_rows(int64_t pos0, int64_t n, const uint8_t* src, int64_t final_length);

  // A pipeline stage sends the K/V rows a step just stored in slot `layer` to the stages whose
  // layers read them (shared K/V): positions [pos0, pos0 + n) of that slot alone, as save_rows
  // lays them out (K then V, per KV head, n rows of head_dim), held or not yet counted in length().
  size_t slot_block_bytes(int64_t layer, int64_t n) const;
  void save_slot_rows(int64_t layer, int64_t pos0, int64_t n, uint8_t* dst) const;
  void load_slot_rows(int64_t layer, int64_t pos0, int64_t n, const uint8_t* src);

  // Raw rows of one head: [rows(layer), head_dim] elements of dtype() (a quantized slot:
  // rows(layer) rows of row_bytes each).
  const uint8_t* keys(int64_t layer, int64_t head) const { return at(layer, 0, head); }
  const uint8_t* values(int64_t layer, int64_t head) const { return at(layer, 1, head); }

 private:
  struct Slot {
    KvSlotShape shape;
    int64_t rows = 0;
    size_t offset = 0, plane = 0;  // bytes: the slot's start, one head's [rows, head_dim]
    size_t row = 0;                // bytes of one head's row
  };
  uint8_t* at(int64_t layer, int kv, int64_t head) const {
    const Slot& s = slots_[layer];
    return data_ + s.offset + (static_cast<size_t>(kv) * s.shape.kv_heads + head) * s.plane;
  }
  void reserve(int64_t max_step_rows);

  std::vector<Slot> slots_;
  int64_t capacity_;
  DType dtype_;
  size_t esize_ = 0, bytes_ = 0, per_position_ = 0;
  int64_t length_ = 0;
  uint8_t* data_ = nullptr;  // mmap'd, bytes_ long; null after a move
};

}  // namespace fp4lm::model
