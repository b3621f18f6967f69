#pragma once
// Engine-owned state of one sequence: what every decoder layer keeps between forward calls, as
// the layers' mixers declared it (model/state_layout.h). Attention layers keep K/V in one
// KvCache (one slot per layer that stores K/V; a sliding-window slot is a ring of its window);
// layers with a fixed-size recurrent state (gated delta-nets: their conv window and delta-rule
// matrices) keep one float32 slot each. forward() advances the whole state together.
// The recurrent state is double-buffered so that a failed forward leaves it as it was: the first
// step of a forward call reads the committed copy and writes the other one, later steps of the
// same call update that one in place, and commit_recurrent() makes it the committed copy.
// Made by CausalLM::new_sequence() or a SequenceStore; not copyable (it owns a reservation).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/kv_cache.h"

namespace fp4lm::model {

class SequenceState {
 public:
  // `recurrent_floats`: the float32 size of each recurrent slot (StateLayout::recurrent_slots;
  // none for a model of attention layers only).
  explicit SequenceState(KvCache kv, int64_t id = -1, const std::vector<size_t>& recurrent_floats = {});

  int64_t length() const { return kv_.length(); }      // positions filled
  int64_t capacity() const { return kv_.capacity(); }  // positions reserved
  size_t reserved_bytes() const { return kv_.bytes() + recurrent_.size() * sizeof(float); }
  size_t used_bytes() const { return kv_.used_bytes() + recurrent_.size() * sizeof(float); }
  size_t bytes_per_position() const { return kv_.bytes_per_position(); }
  // The SequenceStore id (-1 when made directly); error messages name it.
  int64_t id() const { return id_; }
  // Back to length 0 (recurrent state zeroed); the filled memory goes back to the OS, the
  // reservation stays.
  void clear();
  // Drops positions [n, length()) (n <= length()): e.g. to undo a failed forward. A recurrent
  // state cannot be rewound: with one, only n == length() or n == 0 are possible (Error otherwise);
  // a sliding-window ring only as far as it still holds the window before n (Error otherwise).
  void truncate(int64_t n);
  // A failed forward wrote past what a sliding-window ring could undo: the state is unusable
  // until clear() (forward fails naming the sequence).
  bool lost() const { return lost_; }

  KvCache& kv() { return kv_; }
  const KvCache& kv() const { return kv_; }

  // ---- recurrent slots (used by CausalLM and the mixers that declared them) ----
  bool has_recurrent() const { return !offsets_.empty(); }
  // Slot `slot`'s state as the current forward step reads it, and where it writes it (these are
  // the same memory after the first step of a forward call: update in place).
  const float* recurrent_in(int64_t slot) const { return buffer(staged_ ? 1 - cur_ : cur_) + offsets_[slot]; }
  float* recurrent_out(int64_t slot) { return buffer(1 - cur_) + offsets_[slot]; }
  void stage_recurrent() { staged_ = has_recurrent(); }  // a forward step wrote every slot
  // The forward call succeeded: what it wrote becomes the state.
  void commit_recurrent();
  // The forward call failed: length back to n and the recurrent state back to the committed one.
  void abandon_forward(int64_t n);

  // ---- prefix caching (engine/prefix_cache.h) ----
  // Floats of one copy of the recurrent state (all slots).
  size_t recurrent_floats() const { return half_; }
  // Copies the committed recurrent state (the state at length()) to dst (recurrent_floats()
  // floats, as bytes).
  void save_recurrent(void* dst) const;
  // An empty sequence resumes at `length` positions whose K/V were already loaded
  // (KvCache::load_rows), its recurrent state `recurrent` (what save_recurrent wrote; null: none).
  void resume_at(int64_t length, const void* recurrent);

 private:
  float* buffer(int which) { return recurrent_.data() + static_cast<size_t>(which) * half_; }
  const float* buffer(int which) const { return recurrent_.data() + static_cast<size_t>(which) * half_; }

  KvCache kv_;
  int64_t id_;
  std::vector<size_t> offsets_;  // per slot, in floats, within one buffer
  size_t half_ = 0;              // floats per buffer
  std::vector<float> recurrent_;  // two buffers of half_ floats
  int cur_ = 0;                   // the committed buffer
  bool staged_ = false;           // this forward call already wrote buffer 1 - cur_
  bool lost_ = false;
};

}  // namespace fp4lm::model
