#pragma once
// What one sequence's state is made of, as the model's mixers declare it while they load: each
// attention layer that stores K/V declares a KV slot (its heads, head_dim, sliding window, FP8
// scales); each layer with a fixed-size recurrent state (a gated delta-net's conv window and
// delta-rule matrices, a Mamba layer's conv and SSM state) declares its float32 size; a mixer
// whose prefill results depend on how a sequence's rows are cut into steps declares the
// position grid it needs (align_rows). A layer that reads K/V another layer stored declares
// nothing and keeps that layer's slot number (on a pipeline stage after that layer's, its first
// reader declares a copy that the stage before fills). CausalLM and SequenceStore only add these up: a
// new sequence is a KvCache of the declared slots plus the recurrent slots
// (model/state/sequence_state.h), and its bytes are their sum.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "model/state/kv_cache.h"
#include "model/state/sequence_state.h"

namespace fp4lm::model {

class StateLayout {
 public:
  // Decoder layer `layer`'s KV slot (per position: 2 × kv_heads × head_dim values; a window
  // bounds them); returns its number, the `layer` argument of KvCache's accessors.
  int64_t add_kv(int64_t layer, const KvSlotShape& shape);
  // The KV slot decoder layer `layer` declared (a later layer that shares its K/V reads it);
  // Error when it declared none.
  int64_t kv_slot_of_layer(int64_t layer) const;
  // The KV slot decoder layer `layer` declared, or -1.
  int64_t find_kv_slot_of_layer(int64_t layer) const;
  // A pipeline stage: decoder layer `layer` runs on an earlier stage and stores K/V that a layer
  // of this stage reads (ArchDef::kv_source). The first reader here declares a slot for it with
  // add_kv(layer, ...) in its own shape (the config made it the source's), which the stage before
  // fills with the rows of every step (CausalLM::forward).
  void expect_kv_from_earlier_stage(int64_t layer) { received_.push_back(layer); }
  bool expects_kv_from_earlier_stage(int64_t layer) const;
  // A recurrent slot of `floats` float32 values per sequence; returns its number
  // (SequenceState::recurrent_in/out). `replay`: who replays the slot's logged rows when a
  // sequence is cut back inside a rewindable call (null: it cannot be; it must outlive the model's
  // sequences).
  int64_t add_recurrent(size_t floats, const RecurrentReplay* replay = nullptr);
  // Steps cut a sequence's rows only at positions that are multiples of `rows` (when a step has
  // room for at least that many): the mixer's blocks, and so its results, do not depend on what
  // else shares a step.
  void align_rows(int64_t rows);
  // The quantized KV format every slot must be declared in (model/state/kv_quant.h; none: the cache's
  // dtype). Set before the layers load; add_kv refuses a slot in another format.
  void set_kv_quant(KvQuant q) { kv_quant_ = q; }
  KvQuant kv_quant() const { return kv_quant_; }
  // FP8 KV cache: `n` of the k_scale / v_scale tensors the layers looked for were absent (1.0 used).
  void note_missing_kv_scales(int64_t n) { missing_kv_scales_ += n; }

  const std::vector<KvSlotShape>& kv_slots() const { return kv_; }
  const std::vector<size_t>& recurrent_slots() const { return recurrent_; }
  const std::vector<const RecurrentReplay*>& recurrent_replays() const { return replays_; }
  // Whether every recurrent slot can be cut back inside a rewindable call (speculative decoding).
  bool can_rewind() const;
  int64_t row_alignment() const { return align_; }
  int64_t missing_kv_scales() const { return missing_kv_scales_; }

  // A new sequence's K/V of `capacity` positions, `max_step_rows` of them written per step.
  KvCache new_kv_cache(int64_t capacity, int64_t max_step_rows, DType kv_dtype) const;
  // Bytes one sequence of `capacity` positions reserves: its K/V and its recurrent slots (two
  // buffers each, see SequenceState).
  size_t sequence_bytes(int64_t capacity, int64_t max_step_rows, DType kv_dtype) const;
  // Bytes one sequence's replay logs hold after rewindable calls of at most `rows` rows (a
  // speculative verify chunk: k + 1): rows × each replayer's log_row_floats() (0 without any).
  size_t replay_log_bytes(int64_t rows) const;

 private:
  std::vector<KvSlotShape> kv_;
  std::vector<int64_t> kv_owner_;  // per KV slot: the decoder layer that declared it
  std::vector<int64_t> received_;  // layers whose K/V an earlier stage sends
  std::vector<size_t> recurrent_;
  std::vector<const RecurrentReplay*> replays_;  // per recurrent slot
  int64_t align_ = 1;
  int64_t missing_kv_scales_ = 0;
  KvQuant kv_quant_ = KvQuant::none;
};

}  // namespace fp4lm::model
