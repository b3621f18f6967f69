#include "model/sequence_state.h"

#include "core/error.h"

namespace fp4lm::model {

void SequenceState::truncate(int64_t n) {
  if (n < 0 || n > length()) fail("sequence state: cannot truncate {} positions to {}", length(), n);
  kv_.set_length(n);
}

}  // namespace fp4lm::model
