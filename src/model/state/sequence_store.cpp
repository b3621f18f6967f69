#include "model/state/sequence_store.h"

#include <utility>

#include "core/error.h"
#include "model/causal_lm.h"

namespace fp4lm::model {

int64_t SequenceStore::allocate(int64_t capacity) {
  const int64_t id = next_id_;
  auto s = std::make_unique<SequenceState>(lm_.new_sequence(capacity, id));
  reserved_ += s->reserved_bytes();
  states_.emplace(id, std::move(s));
  ++next_id_;
  return id;
}

SequenceState& SequenceStore::get(int64_t id) {
  return const_cast<SequenceState&>(std::as_const(*this).get(id));
}

const SequenceState& SequenceStore::get(int64_t id) const {
  auto it = states_.find(id);
  if (it == states_.end()) fail("sequence store: no sequence with id {}", id);
  return *it->second;
}

void SequenceStore::release(int64_t id) {
  auto it = states_.find(id);
  if (it == states_.end()) fail("sequence store: no sequence with id {} to release", id);
  reserved_ -= it->second->reserved_bytes();
  states_.erase(it);
}

size_t SequenceStore::bytes_for(int64_t capacity) const { return lm_.sequence_bytes(capacity); }

size_t SequenceStore::used_bytes() const {
  size_t b = 0;
  for (const auto& [id, s] : states_) b += s->used_bytes();
  return b;
}

}  // namespace fp4lm::model
