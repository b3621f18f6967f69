#pragma once
// The engine's table of live sequences: allocates a SequenceState per id, frees it on release
// (its memory goes back to the OS at once), and reports reserved bytes for admission control.
// Not synchronized: the one thread that runs the model owns the store.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "model/state/sequence_state.h"

namespace fp4lm::model {

class CausalLM;

class SequenceStore {
 public:
  explicit SequenceStore(const CausalLM& lm) : lm_(lm) {}

  // A new empty sequence of `capacity` positions (0 = the model's max_model_len); returns its id
  // (ids are never reused). Error when capacity exceeds max_model_len.
  int64_t allocate(int64_t capacity = 0);
  SequenceState& get(int64_t id);  // Error for an unknown id
  const SequenceState& get(int64_t id) const;
  bool contains(int64_t id) const { return states_.count(id) != 0; }
  void release(int64_t id);        // Error for an unknown id
  size_t size() const { return states_.size(); }

  // Bytes a sequence of `capacity` positions reserves (0 = max_model_len).
  size_t bytes_for(int64_t capacity) const;
  size_t reserved_bytes() const { return reserved_; }  // all live sequences
  size_t used_bytes() const;                           // their filled positions

 private:
  const CausalLM& lm_;
  std::map<int64_t, std::unique_ptr<SequenceState>> states_;
  int64_t next_id_ = 0;
  size_t reserved_ = 0;
};

}  // namespace fp4lm::model
