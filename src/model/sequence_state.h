#pragma once
// Engine-owned state of one sequence: what every decoder layer keeps between forward calls.
// Today every layer's mixer is attention, so the state is one KvCache holding each layer's K/V
// ([layer][k|v][kv_head][position][head_dim]). A mixer with a recurrent state (gated delta-net)
// adds its per-layer state here next to the cache; forward() advances the whole state together.
// Made by CausalLM::new_sequence() or a SequenceStore; not copyable (it owns a reservation).
#include <cstddef>
#include <cstdint>

#include "model/kv_cache.h"

namespace fp4lm::model {

class SequenceState {
 public:
  explicit SequenceState(KvCache kv, int64_t id = -1) : kv_(std::move(kv)), id_(id) {}

  int64_t length() const { return kv_.length(); }      // positions filled
  int64_t capacity() const { return kv_.capacity(); }  // positions reserved
  size_t reserved_bytes() const { return kv_.bytes(); }
  size_t used_bytes() const { return kv_.used_bytes(); }
  size_t bytes_per_position() const { return kv_.bytes_per_position(); }
  // The SequenceStore id (-1 when made directly); error messages name it.
  int64_t id() const { return id_; }
  // Back to length 0; the filled memory goes back to the OS, the reservation stays.
  void clear() { kv_.clear(); }
  // Drops positions [n, length()) (n <= length()): e.g. to undo a failed forward.
  void truncate(int64_t n);

  KvCache& kv() { return kv_; }
  const KvCache& kv() const { return kv_; }

 private:
  KvCache kv_;
  int64_t id_;
};

}  // namespace fp4lm::model
