#include "engine/causal_lm_step_model.h"

#include "core/error.h"

namespace fp4lm::engine {

CausalLmStepModel::CausalLmStepModel(const model::CausalLM& lm)
    : lm_(lm), bytes_per_position_(lm.new_cache(1).bytes()) {}

int64_t CausalLmStepModel::allocate(int64_t capacity) {
  const int64_t id = next_++;
  caches_.emplace(id, lm_.new_cache(capacity));
  return id;
}

void CausalLmStepModel::release(int64_t seq) { caches_.erase(seq); }

// Until the batched forward lands (model::SequenceStore), each chunk runs on its own; results
// per sequence are the same either way.
void CausalLmStepModel::forward(std::span<const StepChunk> chunks) {
  for (const StepChunk& c : chunks) {
    auto it = caches_.find(c.seq);
    if (it == caches_.end()) fail("engine: unknown sequence {}", c.seq);
    lm_.forward(it->second, c.tokens, c.n, c.logits ? model::LogitsMode::last : model::LogitsMode::none, c.logits);
  }
}

}  // namespace fp4lm::engine
