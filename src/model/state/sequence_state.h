#pragma once
// Engine-owned state of one sequence: what every decoder layer keeps between forward calls, as
// the layers' mixers declared it (model/state/state_layout.h). Attention layers keep K/V in one
// KvCache (one slot per layer that stores K/V; a sliding-window slot is a ring of its window);
// layers with a fixed-size recurrent state (gated delta-nets: their conv window and delta-rule
// matrices) keep one float32 slot each. forward() advances the whole state together.
// The recurrent state is double-buffered so that a failed forward leaves it as it was: the first
// step of a forward call reads the committed copy and writes the other one, later steps of the
// same call update that one in place, and commit_recurrent() makes it the committed copy.
// So after a call the other buffer still holds the state from before it, until the next call:
// truncate() cuts a recurrent state back inside the last call from there, when that call was
// rewindable (SequenceChunk::rewindable: a speculative verify chunk). Its recurrent mixers then
// logged each row's inputs (replay_log), and truncate restores the state before the call and has
// each slot's owner (a RecurrentReplay, declared with the slot) replay the rows kept.
// Made by CausalLM::new_sequence() or a SequenceStore; not copyable (it owns a reservation).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/state/kv_cache.h"

namespace fp4lm::model {

class SequenceState;

// Whoever owns a recurrent slot and can replay the rows a rewindable forward call logged for it
// (the gated delta-net, the Mamba-2 mixer): StateLayout::add_recurrent takes it with the slot.
class RecurrentReplay {
 public:
  virtual ~RecurrentReplay() = default;
  // Advances `state`'s slot by the first `rows` rows its last forward call logged, on top of the
  // state before that call: reads recurrent_in, writes recurrent_out, exactly as forward() does
  // for those rows decoded one at a time (bit-identical state).
  virtual void replay(SequenceState& state, int64_t rows) const = 0;
  // Floats of one row it logs (replay_log's row_floats for its slot): a rewindable call of n rows
  // logs n of them, which lets admission control reserve the log before any call runs.
  virtual size_t log_row_floats() const = 0;
};

class SequenceState {
 public:
  // `recurrent_floats`: the float32 size of each recurrent slot (StateLayout::recurrent_slots;
  // none for a model of attention layers only); `replays`: each slot's replayer (null: the slot
  // cannot be cut back; empty: none can).
  explicit SequenceState(KvCache kv, int64_t id = -1, const std::vector<size_t>& recurrent_floats = {},
                         std::vector<const RecurrentReplay*> replays = {});

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
  // Drops positions [n, length()) (n <= length()): e.g. rejected speculative drafts. With a
  // recurrent state, n must be length(), 0, or inside the last forward call when that call was
  // rewindable (n >= its first position; the kept rows are replayed, see above); Error otherwise.
  // A sliding-window ring only as far as it still holds the window before n (Error otherwise).
  void truncate(int64_t n);
  // A failed forward wrote past what a sliding-window ring could undo: the state is unusable
  // until clear() (forward fails naming the sequence).
  bool lost() const { return lost_; }

  // Multimodal RoPE: what a position adds to its index for its rotary angle once a prompt's image
  // tokens took (t, h, w) positions (SequenceChunk::positions); 0 for text only, back to 0 on clear().
  int64_t rope_delta() const { return rope_delta_; }
  void set_rope_delta(int64_t d) { rope_delta_ = d; }

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

  // ---- rewinding inside the last forward call (speculative verify chunks) ----
  // CausalLM::forward, per chunk, before it runs: whether this call may be cut back later.
  void begin_forward(bool rewindable);
  // The rows a rewindable call's recurrent mixers log: slot `slot`'s rows for positions
  // [pos, pos + n) of this call, `row_floats` floats each (the log grows as the call's steps
  // come; kept between calls, so a verify step allocates nothing once warm).
  float* replay_log(int64_t slot, int64_t pos, int64_t n, size_t row_floats);
  // Slot `slot`'s logged rows, from the call's first position on.
  const float* replay_log(int64_t slot) const { return logs_[static_cast<size_t>(slot)].data(); }
  // Bytes the replay logs hold (the longest rewindable call's rows so far): at most
  // StateLayout::replay_log_bytes(rows) after calls of at most `rows` rows.
  size_t replay_log_bytes() const;

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
  // truncate(n) back inside the last (rewindable) call: the state before it, plus rows replayed.
  void rewind_recurrent(int64_t n);

  KvCache kv_;
  int64_t id_;
  std::vector<size_t> offsets_;  // per slot, in floats, within one buffer
  size_t half_ = 0;              // floats per buffer
  std::vector<float> recurrent_;  // two buffers of half_ floats
  int cur_ = 0;                   // the committed buffer
  bool staged_ = false;           // this forward call already wrote buffer 1 - cur_
  bool lost_ = false;
  std::vector<const RecurrentReplay*> replays_;  // per slot, or empty
  std::vector<std::vector<float>> logs_;         // per slot: the rewindable call's logged rows
  bool rewindable_ = false;                      // the last forward call can be cut back
  int64_t length0_ = 0;                          // length() before that call
  int64_t rope_delta_ = 0;
};

}  // namespace fp4lm::model
